"""What a session points at: the pods and ranks of a job, one adapter per kind.

`kinds/` holds one adapter per target kind behind a registry; `resolving` turns a job's pods
into ranks; `pod_binding` decides, before each round of agent calls, which resolved pods are
still the ones resolved and where they answer now. May import the API models, the settings
and the agents' addresses; nothing of the session lifecycle (`sessions.target_listing` and
`sessions.pod_refresh` list a session's pods with them).
"""
