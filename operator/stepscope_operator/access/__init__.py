"""Who may read a session's artifacts: access reviews and the artifact endpoint.

May import `storage`, the core's artifact links and the settings; nothing of the session
lifecycle.
"""
