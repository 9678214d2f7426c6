"""The trainer <-> sidecar messages on the pod-local Unix socket: one JSON object a line.

Both ends import this module, the trainer with the standard library only (no pydantic), so
each message is a frozen dataclass whose fields say their wire name and type. ``decode``
checks every field against them and raises ``MessageError`` naming the message type and
the field; ``encode`` writes camelCase keys plus ``type``. Keys a receiver does not know
are ignored, so a newer peer's additions do not break an older one.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from stepscope.failures import FailureCode
from stepscope.tiers import Tier


class MessageError(ValueError):
    """A line on the socket is not a valid stepscope message."""


def _wire(name: str, *types: type) -> dict[str, Any]:
    """A message field's metadata: its camelCase wire name and the types it accepts."""
    return {"wire": name, "types": types}


@dataclass(frozen=True)
class Message:
    TYPE: ClassVar[str] = ""

    def to_wire(self) -> dict[str, Any]:
        fields = {f.metadata["wire"]: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"type": self.TYPE, **fields}


# trainer -> sidecar


@dataclass(frozen=True)
class Hello(Message):
    """The first message of every connection: who this trainer process is."""

    TYPE: ClassVar[str] = "hello"
    rank: int = field(metadata=_wire("rank", int))
    pid: int = field(metadata=_wire("pid", int))
    local_rank: int = field(default=0, metadata=_wire("localRank", int))
    world_size: int = field(default=1, metadata=_wire("worldSize", int))
    torch_version: str | None = field(default=None, metadata=_wire("torchVersion", str, type(None)))


@dataclass(frozen=True)
class Progress(Message):
    """Sent twice a second: where the trainer is and how fast it steps."""

    TYPE: ClassVar[str] = "progress"
    global_step: int = field(metadata=_wire("globalStep", int))
    step_time_ms: float | None = field(
        default=None, metadata=_wire("stepTimeMs", float, type(None))
    )
    data_wait_ms: float | None = field(
        default=None, metadata=_wire("dataWaitMs", float, type(None))
    )
    last_step_at: float | None = field(
        default=None, metadata=_wire("lastStepAt", float, type(None))
    )
    step_time_p95_ms: float | None = field(
        default=None, metadata=_wire("stepTimeP95Ms", float, type(None))
    )
    # Totals since the trainer started (step_totals.StepTotals), for the sidecar's metrics.
    # A trainer is tenant code: the sidecar checks each value before exporting it.
    step_buckets: list | None = field(default=None, metadata=_wire("stepBuckets", list, type(None)))
    step_seconds_total: float | None = field(
        default=None, metadata=_wire("stepSecondsTotal", float, type(None))
    )
    data_wait_seconds_total: float | None = field(
        default=None, metadata=_wire("dataWaitSecondsTotal", float, type(None))
    )
    hook_seconds_total: float | None = field(
        default=None, metadata=_wire("hookSecondsTotal", float, type(None))
    )


@dataclass(frozen=True)
class WindowStarted(Message):
    TYPE: ClassVar[str] = "window_started"
    capture_id: str = field(metadata=_wire("captureId", str))
    first_step: int = field(metadata=_wire("firstStep", int))


@dataclass(frozen=True)
class WindowFinished(Message):
    """The window's last step ended; ``steps`` are StepRecord.to_wire() dicts and
    ``traceFile`` is the exported trace (None when the rank took no trace)."""

    TYPE: ClassVar[str] = "window_finished"
    capture_id: str = field(metadata=_wire("captureId", str))
    first_step: int = field(metadata=_wire("firstStep", int))
    last_step: int = field(metadata=_wire("lastStep", int))
    steps: list = field(metadata=_wire("steps", list))
    trace_file: str | None = field(default=None, metadata=_wire("traceFile", str, type(None)))
    export_stall_ms: float | None = field(
        default=None, metadata=_wire("exportStallMs", float, type(None))
    )


@dataclass(frozen=True)
class WindowFailed(Message):
    """The window cannot be captured on this rank: a code, words for people, and where the
    trainer was when it found out."""

    TYPE: ClassVar[str] = "window_failed"
    capture_id: str = field(metadata=_wire("captureId", str))
    code: FailureCode = field(metadata=_wire("code", FailureCode))
    message: str = field(metadata=_wire("message", str))
    reached_step: int | None = field(default=None, metadata=_wire("reachedStep", int, type(None)))
    start_step: int | None = field(default=None, metadata=_wire("startStep", int, type(None)))


@dataclass(frozen=True)
class HangDumpTaken(Message):
    """The answer to ``DumpStacks``: ``dump`` is a RankDump in wire form (hang_capture.py),
    made on a hook thread while the training thread may be blocked."""

    TYPE: ClassVar[str] = "hang_dump"
    request_id: str = field(metadata=_wire("requestId", str))
    dump: dict = field(metadata=_wire("dump", dict))


# sidecar -> trainer


@dataclass(frozen=True)
class Arm(Message):
    """Record global steps [startStep, startStep+steps) at ``tier``; ``trace`` is False for
    ranks that only report step timings."""

    TYPE: ClassVar[str] = "arm"
    capture_id: str = field(metadata=_wire("captureId", str))
    start_step: int = field(metadata=_wire("startStep", int))
    steps: int = field(metadata=_wire("steps", int))
    warmup_steps: int = field(default=0, metadata=_wire("warmupSteps", int))
    tier: Tier = field(default=Tier.OPS, metadata=_wire("tier", Tier))
    trace: bool = field(default=True, metadata=_wire("trace", bool))


@dataclass(frozen=True)
class Cancel(Message):
    TYPE: ClassVar[str] = "cancel"
    capture_id: str = field(metadata=_wire("captureId", str))


@dataclass(frozen=True)
class DumpStacks(Message):
    """Dump every thread's stack and the flight recorder now; answered by ``HangDumpTaken``
    from a hook thread, never from the training thread, which may be stuck."""

    TYPE: ClassVar[str] = "dump_stacks"
    request_id: str = field(metadata=_wire("requestId", str))


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Hello,
        Progress,
        WindowStarted,
        WindowFinished,
        WindowFailed,
        HangDumpTaken,
        Arm,
        Cancel,
        DumpStacks,
    )
}


def encode(message: Message) -> bytes:
    return (json.dumps(message.to_wire(), separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> Message:
    """Parse and check one line; raises MessageError naming what is wrong."""
    try:
        raw = json.loads(line)
    except ValueError as error:
        raise MessageError(f"not JSON: {line[:80]!r} ({error})") from None
    if not isinstance(raw, dict):
        raise MessageError(f"not a stepscope message (a JSON object with 'type'): {line[:80]!r}")
    kind = raw.get("type")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        known = ", ".join(sorted(MESSAGE_TYPES))
        raise MessageError(f"unknown message type {kind!r}; expected one of {known}")
    values = {}
    for spec in dataclasses.fields(cls):
        wire, types = spec.metadata["wire"], spec.metadata["types"]
        if wire not in raw:
            if spec.default is dataclasses.MISSING:
                raise MessageError(f"{kind} message: field {wire!r} is missing")
            continue
        values[spec.name] = _check(kind, wire, raw[wire], types)
    return cls(**values)


def _check(kind: str, wire: str, value: Any, types: tuple[type, ...]) -> Any:
    for expected in types:
        if expected is type(None) and value is None:
            return None
        if isinstance(expected, type) and issubclass(expected, str) and expected is not str:
            # An enum of names: the value must be one of them.
            if isinstance(value, str) and value in {member.value for member in expected}:
                return expected(value)
            continue
        # JSON has one number type; an int is a valid float, but a bool is neither.
        if expected is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if expected is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if expected in (str, bool, list, dict) and type(value) is expected:
            return value
    wanted = " or ".join(_describe(t) for t in types)
    raise MessageError(f"{kind} message: field {wire!r} must be {wanted}, got {value!r}")


def _describe(expected: type) -> str:
    if expected is type(None):
        return "null"
    if issubclass(expected, str) and expected is not str:
        return "one of " + ", ".join(repr(member.value) for member in expected)
    words = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    return words.get(expected, "an object" if expected is dict else "a list")
