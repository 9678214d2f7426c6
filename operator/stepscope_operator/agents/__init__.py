"""Talking to the agent sidecars: the signed client, bounded fan-out, and the contract.

`contract` is the one home of what the webhook injects and the agent expects. May import the
API's agent wire models and the settings; nothing of sessions or schedules.
"""
