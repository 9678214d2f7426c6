"""The trainer <-> sidecar messages on the pod-local Unix socket: one JSON object a line.

Both ends import this module (the trainer with the standard library only). Every message
has a ``type``; the other keys are listed by each constant's comment.
"""

from __future__ import annotations

import json
from typing import Any

# trainer -> sidecar
HELLO = "hello"  # rank, localRank, pid, worldSize, torchVersion
PROGRESS = "progress"  # globalStep, stepTimeMs, dataWaitMs, lastStepAt
WINDOW_STARTED = "window_started"  # captureId, firstStep
WINDOW_FINISHED = (
    "window_finished"  # captureId, firstStep, lastStep, steps, traceFile, exportStallMs
)
WINDOW_FAILED = "window_failed"  # captureId, reason
# sidecar -> trainer
ARM = "arm"  # captureId, startStep, steps, warmupSteps, tier, trace
CANCEL = "cancel"  # captureId


def encode(message_type: str, **fields: Any) -> bytes:
    return (json.dumps({"type": message_type, **fields}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any]:
    message = json.loads(line)
    if not isinstance(message, dict) or "type" not in message:
        raise ValueError(f"not a stepscope message: {line[:80]!r}")
    return message
