"""The wire contract of a hang dump: what one rank says about where it is stuck.

A dump is made inside the trainer by a hook thread (stepscope_agent/hang_capture.py), while
the training thread may be blocked in a collective, and travels as plain JSON over the
pod-local socket to the sidecar. The sidecar validates it against ``RankDump`` (so every
list and string is bounded here, whatever the trainer sent), stores the full dump next to
the session's artifacts with an upload grant, and answers the operator with the digest of
every rank in its pod (``RankDump.digest``): the last few collectives per process group,
the main thread's stack and the threads that sit in a collective. Attribution
(stepscope/hang/attribution.py) reads either form and reaches the same verdict as long as
the ranks diverge within the digest's tail, which is where a hang leaves them.

Seen in torch 2.15: gloo's flight-recorder entries keep ``state: scheduled`` after they
complete, but ``retired`` turns true and the group's ``lastCompletedCollective`` moves, so
completion is read from those, and the sequence ids entered per rank carry the main signal.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from stepscope.api.agent import (
    API_VERSION,
    KEY_MAX_LENGTH,
    MAX_RANKS_PER_POD,
    ArtifactGrant,
    PodName,
    WireModel,
)
from stepscope.api.text import BoundedText

HANG_DUMPS_PATH = f"/{API_VERSION}/hang-dumps"

# Bounds of one rank's dump. A trainer with more threads, deeper stacks or more groups
# is cut to these where the dump is made and refused past them where it is read.
MAX_THREADS = 32
MAX_FRAMES = 40
MAX_GROUPS = 64
MAX_GROUP_RANKS = 4096
MAX_ENTRIES_PER_GROUP = 256
MAX_ENTRIES = 2048
MAX_DIMS = 8
MAX_TENSORS = 16
PATH_MAX_LENGTH = 256
NAME_MAX_LENGTH = 128
CODE_MAX_LENGTH = 160
NOTE_MAX_LENGTH = 300
MAX_NOTES = 8
# The most bytes of JSON one rank's dump may take on the socket and in storage.
MAX_DUMP_BYTES = 1024 * 1024
# The digest the operator attributes with keeps this much of each dump.
DIGEST_ENTRIES_PER_GROUP = 24
DIGEST_THREADS = 4
DIGEST_FRAMES = 24
# How long the sidecar waits for its trainers' dumps unless the request says otherwise.
DEFAULT_DUMP_TIMEOUT_SECONDS = 10.0
MAX_DUMP_TIMEOUT_SECONDS = 60.0

# A tensor's shape: at most MAX_DIMS sizes (the dump cuts longer ones).
Shape = Annotated[list[int], Field(max_length=MAX_DIMS)]


class Frame(WireModel):
    """One Python frame: file, line and function, and the source line when it was readable."""

    file: BoundedText(PATH_MAX_LENGTH)
    line: int = Field(ge=0)
    function: BoundedText(NAME_MAX_LENGTH)
    code: BoundedText(CODE_MAX_LENGTH) | None = None

    @property
    def where(self) -> str:
        """'train.py:57 in load_batch', the file by its last path component."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} in {self.function}"


class ThreadStack(WireModel):
    """One thread's stack, outermost frame first (as ``traceback`` prints it)."""

    name: BoundedText(NAME_MAX_LENGTH)
    ident: int
    main: bool = False
    frames: list[Frame] = Field(default_factory=list, max_length=MAX_FRAMES)
    frames_dropped: int = Field(0, ge=0, description="Outer frames left out to fit MAX_FRAMES.")


class Collective(WireModel):
    """One flight-recorder entry: a collective this rank entered, by sequence id per group."""

    group: BoundedText(NAME_MAX_LENGTH) = Field(description="The process group's name.")
    seq: int = Field(ge=0, description="collective_seq_id: the n-th collective on the group.")
    op: BoundedText(NAME_MAX_LENGTH) = Field(description="e.g. gloo:all_reduce, nccl:broadcast.")
    input_sizes: list[Shape] = Field(default_factory=list, max_length=MAX_TENSORS)
    output_sizes: list[Shape] = Field(default_factory=list, max_length=MAX_TENSORS)
    dtypes: list[BoundedText(32)] = Field(default_factory=list, max_length=MAX_TENSORS)
    state: BoundedText(32) | None = None
    retired: bool | None = Field(None, description="True once the work object completed.")
    created_ns: int | None = Field(None, description="Unix nanoseconds when it was enqueued.")

    @property
    def signature(self) -> tuple:
        """What every rank must agree on for the same sequence id: op, shapes and dtypes."""
        return (
            self.op,
            tuple(map(tuple, self.input_sizes)),
            tuple(map(tuple, self.output_sizes)),
            tuple(self.dtypes),
        )

    @property
    def op_name(self) -> str:
        """The op without its backend prefix: all_reduce for gloo:all_reduce."""
        return self.op.rsplit(":", 1)[-1]

    @property
    def shape_text(self) -> str:
        sizes = ", ".join("x".join(map(str, s)) or "scalar" for s in self.input_sizes)
        kinds = ",".join(sorted(set(self.dtypes)))
        return f"[{sizes}]" + (f" {kinds}" if kinds else "")


class GroupInfo(WireModel):
    """A process group this rank belongs to, and how far it got on it."""

    name: BoundedText(NAME_MAX_LENGTH)
    description: BoundedText(NAME_MAX_LENGTH) | None = None
    ranks: list[int] = Field(
        default_factory=list,
        max_length=MAX_GROUP_RANKS,
        description="Global ranks of the group's members; empty when unknown.",
    )
    last_enqueued: int | None = Field(None, description="Last sequence id this rank entered.")
    last_completed: int | None = Field(None, description="Last sequence id that completed.")


class RankDump(WireModel):
    """One rank's answer to a hang dump request, or the sidecar's note that it gave none."""

    kind: Literal["stepscope-hang-dump"] = "stepscope-hang-dump"
    rank: int = Field(ge=0)
    pid: int | None = None
    pod: BoundedText(253) | None = Field(None, description="Filled in by the sidecar.")
    node: BoundedText(253) | None = Field(None, description="Filled in by the sidecar.")
    answered: bool = Field(
        True, description="False when the trainer did not answer within the timeout."
    )
    step: int | None = Field(None, description="The step this rank is in.")
    last_step_at: float | None = Field(None, description="Unix seconds when its last step ended.")
    dumped_at: float | None = Field(None, description="Unix seconds when the dump was made.")
    flight_recorder: bool = Field(
        False, description="Whether the flight recorder's buffer could be read."
    )
    groups: list[GroupInfo] = Field(default_factory=list, max_length=MAX_GROUPS)
    collectives: list[Collective] = Field(default_factory=list, max_length=MAX_ENTRIES)
    threads: list[ThreadStack] = Field(default_factory=list, max_length=MAX_THREADS)
    notes: list[BoundedText(NOTE_MAX_LENGTH)] = Field(default_factory=list, max_length=MAX_NOTES)

    def main_thread(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), None)

    def digest(self) -> RankDump:
        """The part attribution needs: the last collectives of each group, the main thread
        and the threads inside a collective, each with its innermost frames."""
        tails: list[Collective] = []
        for group in {c.group for c in self.collectives}:
            entries = sorted((c for c in self.collectives if c.group == group), key=_seq)
            tails += entries[-DIGEST_ENTRIES_PER_GROUP:]
        ranked = sorted(self.threads, key=lambda t: (not t.main, not _in_collective(t)))
        threads = [
            t.model_copy(
                update={
                    "frames": t.frames[-DIGEST_FRAMES:],
                    "frames_dropped": t.frames_dropped + max(0, len(t.frames) - DIGEST_FRAMES),
                }
            )
            for t in ranked[:DIGEST_THREADS]
        ]
        return self.model_copy(
            update={
                "collectives": sorted(tails, key=lambda c: (c.group, c.seq)),
                "threads": threads,
            }
        )


def _seq(entry: Collective) -> int:
    return entry.seq


def _in_collective(thread: ThreadStack) -> bool:
    return any("distributed_c10d" in f.file for f in thread.frames)


class HangDumpRequest(WireModel):
    """Body of ``POST /v1/hang-dumps``: ask every trainer in the pod for a dump now."""

    model_config = WireModel.model_config | {"extra": "forbid"}

    request_id: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63)
    timeout_seconds: float = Field(DEFAULT_DUMP_TIMEOUT_SECONDS, gt=0, le=MAX_DUMP_TIMEOUT_SECONDS)
    grants: dict[int, ArtifactGrant] = Field(
        default_factory=dict,
        max_length=MAX_RANKS_PER_POD,
        description="Per rank, where to store its full dump; ranks without one are not stored.",
    )


class PodHangDumps(WireModel):
    """Answer of ``POST /v1/hang-dumps``: the digest of every rank in the pod."""

    pod: PodName
    node: PodName | None = None
    ranks: list[RankDump] = Field(default_factory=list, max_length=MAX_RANKS_PER_POD)
    stored: list[Annotated[str, Field(max_length=KEY_MAX_LENGTH)]] = Field(
        default_factory=list,
        max_length=MAX_RANKS_PER_POD,
        description="Keys of the stored full dumps.",
    )
    notes: list[BoundedText(NOTE_MAX_LENGTH)] = Field(default_factory=list, max_length=MAX_NOTES)
