"""The mutating webhook: inject the agent into training pods, with its own TLS.

May import `agents.contract`, `agents.signing` and the settings; nothing of the session
lifecycle, so a pod is admitted whatever the sessions are doing.
"""
