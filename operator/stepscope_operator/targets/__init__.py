"""What a session points at: the pods and ranks of a job, one adapter per kind.

`kinds/` holds one adapter per target kind behind a registry; `resolving` turns a job's pods
into ranks, `listing` reads the pods. May import the API models and `kubeapi`; nothing of
the session lifecycle.
"""
