"""Hang verdicts: when a job is stuck rather than slow, and which rank, collective and line
hold it, from the ranks' stack and flight-recorder dumps. Pure; the operator's `hang` package
and `stepscope analyze DIR` both call it. Imports only the API models."""
