"""Per-rank traces for the agent fleet: real recorded traces, perturbed per rank.

The fleet's simulated ranks export what a real rank's profiler would: a Kineto trace of the
armed window, made from a real recorded trace so that the sidecar's real summariser reads
real operator, thread, kernel and collective structure. Two recordings can be the source:

* ``cpu`` (`RecordedTraces`): the four ranks of a real 4-rank gloo DDP run
  (``tests/data/scenarios/communication_bound``: ~76 ms steps, one all-reduce per step);
* ``gpu`` (`GpuRecordedTraces`): rank 0 of a public 2-rank NCCL DDP run on NVIDIA GPUs
  (``shared/traces/gpu/ddp-2rank-nccl-rank0.json.gz``, see its NOTICE: ~220 ms steps, two
  broadcasts and five all-reduces per step, each an ``ncclKernel_*`` on its own stream).

Per rank, either way:

* the profiler steps are renumbered to the armed window, as if recorded there;
* every timestamp moves by a random clock offset (up to half a second), which the
  cross-rank alignment has to undo;
* the rank arrives at collectives later by its lateness plus up to ``JITTER_OF_STEP`` of a
  step of random jitter, and every rank completes each collective together: a late rank
  waits less in it, as a straggler does;
* ``distributedInfo`` names the rank and the world size.

A `Lateness` says which ranks are late and by how much, as a share of the recorded step so
that one injection means the same on either source: one straggler, the ranks of one slow
node, or none (noise only).

The two sources cannot be mixed in one job: a job has one backend, and the analysis groups
traces by world size, backend and device (`merge.split_into_jobs`), while a gloo rank and
an NCCL rank share no collective record kind to align on (`alignment.TIMING_SOURCES`).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDED = REPO_ROOT / "tests" / "data" / "scenarios" / "communication_bound"
RECORDED_RANKS = 4
# The recorded run's profiled steps; sessions of the fleet ask for this many.
RECORDED_STEPS = 5
CLOCK_OFFSET_US = 500_000.0
# Arrival jitter at each collective: up to 2% of a step, twice the analysis's noise floor,
# so that jitter reorders the ranks at collectives without making any rank late on average.
JITTER_OF_STEP = 0.02
# A late all-reduce keeps at least this fraction of its recorded duration.
MIN_KEPT_FRACTION = 0.1
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Lateness:
    """How late each rank arrives at collectives, as a share of the recorded step (0 when
    not named)."""

    by_rank: dict[int, float]

    @classmethod
    def none(cls) -> Lateness:
        return cls({})

    @classmethod
    def straggler(cls, rank: int, late_share: float = 0.25) -> Lateness:
        return cls({rank: late_share})

    @classmethod
    def slow_node(cls, ranks: range | list[int], late_share: float = 0.15) -> Lateness:
        return cls(dict.fromkeys(ranks, late_share))

    def of(self, rank: int) -> float:
        return self.by_rank.get(rank, 0.0)

    @property
    def largest(self) -> float:
        """The latest rank's lateness: what every other rank waits at a collective."""
        return max(self.by_rank.values(), default=0.0)


class _PerturbedTraces:
    """What both sources share: a rank's copy is made as JSON text and written whole."""

    def perturbed_text(
        self, rank: int, world_size: int, first_step: int, lateness: Lateness, seed: int
    ) -> str:
        raise NotImplementedError

    def write(
        self,
        path: Path,
        rank: int,
        world_size: int,
        first_step: int,
        lateness: Lateness | None = None,
        seed: int = 0,
    ) -> Path:
        """Write rank `rank`'s trace of the window from `first_step`, as the profiler
        exports it (plain JSON; the sidecar compresses it)."""
        text = self.perturbed_text(rank, world_size, first_step, lateness or Lateness.none(), seed)
        path.write_text(text)
        return path


def _trace_text(header: dict, rank: int, world_size: int, events: list[str]) -> str:
    """A trace's JSON text: its top-level keys, naming `rank`, then the event texts."""
    header = copy.deepcopy(header)
    _name_rank(header, rank, world_size)
    head = json.dumps(header, separators=(",", ":"))
    return head[:-1] + ',"traceEvents":[' + ",".join(events) + "]}"


class RecordedTraces(_PerturbedTraces):
    """The recorded gloo ranks' traces, serialised once but for what a rank changes;
    `write` makes one rank's perturbed copy. Each all-reduce on the gloo worker starts
    later and ends when it ended.

    A 1024-rank fleet writes 1024 of these on two cores, so each recorded event is kept
    as its JSON text less its timestamp (and its name, for a profiler step; its duration,
    for an all-reduce): a rank's copy formats those few numbers into the texts instead of
    copying and serialising every event again."""

    def __init__(self, folder: Path = RECORDED) -> None:
        base = [
            json.loads(gzip.decompress((folder / f"rank-{r}.json.gz").read_bytes()))
            for r in range(RECORDED_RANKS)
        ]
        self._layouts = [_CpuLayout(trace) for trace in base]
        self.step_ms = statistics.median(
            float(e["dur"]) / 1e3 for trace in base for e in _step_events(trace["traceEvents"])
        )

    def perturbed_text(
        self, rank: int, world_size: int, first_step: int, lateness: Lateness, seed: int
    ) -> str:
        """Rank `rank`'s trace of the window from `first_step`, as JSON text."""
        rng = random.Random(seed * 1_000_003 + rank)
        layout = self._layouts[rank % RECORDED_RANKS]
        step_shift = first_step - layout.first_step
        offset = rng.uniform(-CLOCK_OFFSET_US, CLOCK_OFFSET_US)
        late_ms, jitter_ms = lateness.of(rank) * self.step_ms, JITTER_OF_STEP * self.step_ms
        parts = list(layout.untimed)
        for ts, kind, value, rest in layout.timed:
            start = ts + offset
            if kind is _STEP:
                parts.append(f'{{"ts":{start!r},"name":"ProfilerStep#{value + step_shift}"{rest}')
            elif kind is _ALL_REDUCE:
                late_us = (late_ms + rng.uniform(0.0, jitter_ms)) * 1e3
                late_us = min(late_us, value * (1 - MIN_KEPT_FRACTION))
                parts.append(f'{{"ts":{start + late_us!r},"dur":{value - late_us!r}{rest}')
            else:
                parts.append(f'{{"ts":{start!r}{rest}')
        return _trace_text(layout.header, rank, world_size, parts)


_STEP, _ALL_REDUCE, _OTHER = object(), object(), object()


class _CpuLayout:
    """One recorded gloo rank's trace as texts: the untimed events whole; each timed one as
    (ts, kind, the step number or the duration, the rest of its text after those keys)."""

    def __init__(self, trace: dict) -> None:
        self.header = {k: v for k, v in trace.items() if k != "traceEvents"}
        self.first_step = _first_step(trace)
        self.untimed: list[str] = []
        self.timed: list[tuple[float, object, float, str]] = []
        for event in trace["traceEvents"]:
            if "ts" not in event:
                self.untimed.append(json.dumps(event, separators=(",", ":")))
                continue
            rest = dict(event)
            ts = float(rest.pop("ts"))
            step = _STEP_NAME.match(str(event.get("name", "")))
            if step:
                del rest["name"]
                kind, value = _STEP, int(step.group(1))
            elif event.get("name") == "gloo:all_reduce" and event.get("ph") == "X":
                kind, value = _ALL_REDUCE, float(rest.pop("dur"))
            else:
                kind, value = _OTHER, 0.0
            text = json.dumps(rest, separators=(",", ":"))
            self.timed.append((ts, kind, value, "}" if text == "{}" else "," + text[1:]))


def _timed(event: dict) -> bool:
    return isinstance(event.get("ts"), int | float)


def _step_events(events) -> list[dict]:
    return [
        e
        for e in events
        if e.get("ph") == "X" and _timed(e) and _STEP_NAME.match(str(e.get("name", "")))
    ]


def _name_rank(trace: dict, rank: int, world_size: int) -> None:
    info = trace.setdefault("distributedInfo", {})
    info.update(rank=rank, world_size=world_size)
    for group in info.get("pg_config") or []:
        group.update(pg_size=world_size, ranks=[])


def _first_step(trace: dict) -> int:
    steps = [
        int(match.group(1))
        for event in trace["traceEvents"]
        if (match := _STEP_NAME.match(str(event.get("name", ""))))
    ]
    return min(steps)
