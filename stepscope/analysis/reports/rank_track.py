"""The compact all-ranks track of the merged trace: every rank, a few events per step.

The merged trace holds full traces of a few chosen ranks (`trace_selection`); this track
keeps the others visible. It is built from the job summary alone (each rank's step
records and collective timings, which the sidecars already summarised), never from a
raw trace, so it costs a few events per rank and step whatever the traces weigh.

Two Perfetto processes, one thread per rank in each, on the aligned timeline:

* "all ranks: steps" — one slice per captured step, with its duration and the rank's
  arrival lag in that step;
* "all ranks: arrival lag" — one slice per step from the first rank's arrival at the
  step's latest-arriving collective to this rank's arrival there (its lag, as
  `alignment.arrival_lags` measures it), so the straggler's long bars stand out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from stepscope.analysis.merging.alignment import collective_timings
from stepscope.analysis.model.job_summary import JobSummary

# Far above any rank (pid = rank for the full traces), so the tracks never collide.
STEPS_PID = 2_000_000_000
LAG_PID = 2_000_000_001
_PROCESSES = ((STEPS_PID, "all ranks: steps", -2), (LAG_PID, "all ranks: arrival lag", -1))


@dataclass(frozen=True)
class StepLag:
    """One rank's arrival at the collective of a step where it was latest, aligned."""

    first_arrival_us: float
    arrival_us: float

    @property
    def lag_ms(self) -> float:
        return (self.arrival_us - self.first_arrival_us) / 1000.0


def step_arrival_lags(job: JobSummary) -> dict[int, dict[int, StepLag]]:
    """rank -> step -> the rank's largest arrival lag in that step, on the aligned clock.

    Only collectives seen on every rank and tagged with a step count, as in
    `alignment.arrival_lags`; a job without shared collectives has no lags."""
    _, timings = collective_timings(job.ranks)
    ranks = sorted(timings)
    if not ranks:
        return {}
    shared = set.intersection(*(set(timings[rank]) for rank in ranks))
    offsets = job.offsets_us
    lags: dict[int, dict[int, StepLag]] = defaultdict(dict)
    for key in shared:
        step = timings[ranks[0]][key].step
        if step is None:
            continue
        arrivals = {r: timings[r][key].arrival_us + offsets.get(r, 0.0) for r in ranks}
        first = min(arrivals.values())
        for rank, arrival in arrivals.items():
            known = lags[rank].get(step)
            if known is None or arrival - first > known.arrival_us - known.first_arrival_us:
                lags[rank][step] = StepLag(first, arrival)
    return dict(lags)


def _metadata(pid: int, name: str, sort_index: int) -> list[dict]:
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": sort_index},
        },
    ]


def _thread(pid: int, rank: int, label: str) -> list[dict]:
    tid = rank + 1
    return [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}},
        {
            "ph": "M",
            "name": "thread_sort_index",
            "pid": pid,
            "tid": tid,
            "args": {"sort_index": rank},
        },
    ]


def all_ranks_track(job: JobSummary, chosen: set[int] | frozenset[int] = frozenset()) -> list[dict]:
    """Chrome trace events of the all-ranks track; `chosen` ranks are marked in their
    thread names, since their full traces are in the same file."""
    lags = step_arrival_lags(job)
    offsets = job.offsets_us
    events: list[dict] = []
    for pid, name, sort_index in _PROCESSES:
        events += _metadata(pid, name, sort_index)
    for summary in sorted(job.ranks, key=lambda s: s.rank):
        rank = summary.rank
        where = job.placement.get(rank)
        label = f"rank {rank}" + (f" ({where.node})" if where and where.node else "")
        label += " [full trace]" if rank in chosen else ""
        events += _thread(STEPS_PID, rank, label) + _thread(LAG_PID, rank, label)
        shift = offsets.get(rank, 0.0)
        rank_lags = lags.get(rank, {})
        for step in summary.steps:
            lag = rank_lags.get(step.step)
            args = {"step_ms": round(step.duration_ms, 3)}
            if lag is not None:
                args["arrival_lag_ms"] = round(lag.lag_ms, 3)
            events.append(
                {
                    "ph": "X",
                    "name": f"step {step.step}",
                    "cat": "stepscope.steps",
                    "pid": STEPS_PID,
                    "tid": rank + 1,
                    "ts": round(step.start_us + shift, 3),
                    "dur": round(max(step.end_us - step.start_us, 0.0), 3),
                    "args": args,
                }
            )
        for step, lag in sorted(rank_lags.items()):
            events.append(
                {
                    "ph": "X",
                    "name": f"late {lag.lag_ms:.2f} ms",
                    "cat": "stepscope.arrival_lag",
                    "pid": LAG_PID,
                    "tid": rank + 1,
                    "ts": round(lag.first_arrival_us, 3),
                    "dur": round(max(lag.arrival_us - lag.first_arrival_us, 0.0), 3),
                    "args": {"step": step, "arrival_lag_ms": round(lag.lag_ms, 3)},
                }
            )
    return events
