"""What a session points at: the pods and ranks of a job, one adapter per kind.

`kinds/` holds one adapter per target kind behind a registry; `resolving` turns a job's pods
into ranks. May import the API models and the settings; nothing of the session lifecycle
(`sessions.target_listing` lists a session's pods with them).
"""
