"""Hang checks: watch a job's step progress, and diagnose a stuck job from its ranks' dumps.

May import `agents` (to ask for dumps), `storage`, the API models and the core's hang
attribution; the sessions never import it.
"""
