"""Per-rank traces for the agent fleet: real recorded traces, perturbed per rank.

The fleet's simulated ranks export what a real rank's profiler would: a Kineto trace of the
armed window. Each is made from one of the four ranks of a real recorded 4-rank gloo DDP run
(``tests/data/scenarios/communication_bound``: ~77 ms steps, one all-reduce per step), so the
sidecar's real summariser reads real operator, thread and collective structure. Per rank:

* the profiler steps are renumbered to the armed window, as if recorded there;
* every timestamp moves by a random clock offset (up to half a second), which the
  cross-rank alignment has to undo;
* each all-reduce on the gloo worker starts later by the rank's lateness plus up to
  ``NOISE_MS`` of random jitter, and ends when it ended: a late rank arrives late at the
  collective and waits less in it, as a straggler does, while every rank completes it
  together;
* ``distributedInfo`` names the rank and the world size.

A `Lateness` says which ranks are late and by how much: one straggler, the ranks of one
slow node, or none (noise only).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDED = REPO_ROOT / "tests" / "data" / "scenarios" / "communication_bound"
RECORDED_RANKS = 4
# The recorded run's profiled steps; sessions of the fleet ask for this many.
RECORDED_STEPS = 5
CLOCK_OFFSET_US = 500_000.0
NOISE_MS = 0.5
# A late all-reduce keeps at least this fraction of its recorded duration.
MIN_KEPT_FRACTION = 0.1
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Lateness:
    """How late each rank arrives at collectives, in milliseconds (0 when not named)."""

    by_rank: dict[int, float]

    @classmethod
    def none(cls) -> Lateness:
        return cls({})

    @classmethod
    def straggler(cls, rank: int, late_ms: float = 20.0) -> Lateness:
        return cls({rank: late_ms})

    @classmethod
    def slow_node(cls, ranks: range | list[int], late_ms: float = 12.0) -> Lateness:
        return cls(dict.fromkeys(ranks, late_ms))

    def of(self, rank: int) -> float:
        return self.by_rank.get(rank, 0.0)


class RecordedTraces:
    """The recorded ranks' traces, parsed once; `write` makes one rank's perturbed copy."""

    def __init__(self, folder: Path = RECORDED) -> None:
        self._base = [
            json.loads(gzip.decompress((folder / f"rank-{r}.json.gz").read_bytes()))
            for r in range(RECORDED_RANKS)
        ]
        self._first_step = [_first_step(trace) for trace in self._base]

    def perturbed(
        self, rank: int, world_size: int, first_step: int, late_ms: float, seed: int
    ) -> dict:
        rng = random.Random(seed * 1_000_003 + rank)
        trace = copy.deepcopy(self._base[rank % RECORDED_RANKS])
        step_shift = first_step - self._first_step[rank % RECORDED_RANKS]
        offset = rng.uniform(-CLOCK_OFFSET_US, CLOCK_OFFSET_US)
        for event in trace["traceEvents"]:
            if "ts" in event:
                event["ts"] = float(event["ts"]) + offset
            step = _STEP_NAME.match(str(event.get("name", "")))
            if step:
                event["name"] = f"ProfilerStep#{int(step.group(1)) + step_shift}"
            elif event.get("name") == "gloo:all_reduce" and event.get("ph") == "X":
                dur = float(event["dur"])
                late_us = (late_ms + rng.uniform(0.0, NOISE_MS)) * 1e3
                late_us = min(late_us, dur * (1 - MIN_KEPT_FRACTION))
                event["ts"] += late_us
                event["dur"] = dur - late_us
        info = trace.setdefault("distributedInfo", {})
        info.update(rank=rank, world_size=world_size)
        for group in info.get("pg_config") or []:
            group.update(pg_size=world_size, ranks=[])
        return trace

    def write(
        self,
        path: Path,
        rank: int,
        world_size: int,
        first_step: int,
        late_ms: float = 0.0,
        seed: int = 0,
    ) -> Path:
        """Write rank `rank`'s trace of the window from `first_step`, as the profiler
        exports it (plain JSON; the sidecar compresses it)."""
        trace = self.perturbed(rank, world_size, first_step, late_ms, seed)
        path.write_text(json.dumps(trace, separators=(",", ":")))
        return path


def _first_step(trace: dict) -> int:
    steps = [
        int(match.group(1))
        for event in trace["traceEvents"]
        if (match := _STEP_NAME.match(str(event.get("name", ""))))
    ]
    return min(steps)
