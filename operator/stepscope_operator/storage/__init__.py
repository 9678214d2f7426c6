"""S3 for the operator: buckets, short-lived upload grants and POST policies, retention.

The one place the operator talks to object storage. May import the core's storage layout
and the settings; nothing of sessions, schedules or agents.
"""
