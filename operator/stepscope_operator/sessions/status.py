"""Derive a ProfileSession's status from what the operator observed. Pure: no I/O.

The handlers decide *when* to write; these functions decide *what*: the rank
accounting, the final phase, the analysed summary in the API's shape, the
conditions (meta/v1 style, with observedGeneration) and the Event that tells
each phase change in `kubectl describe`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import BaseModel

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.rank.step_timings import is_step_timings
from stepscope.api.agent import CaptureFailure, CaptureState, CaptureSummary, RankCaptureStatus
from stepscope.api.critical_path_status import critical_path_status
from stepscope.api.gpu_status import gpu_counters_status
from stepscope.api.memory_status import memory_peak_status
from stepscope.api.meta import CONDITION_MESSAGE_MAX_LENGTH, Condition
from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import TERMINAL_PHASES, RankFailure, RankRef, RanksStatus
from stepscope.api.verdict import (
    FINDING_TEXT_MAX_LENGTH,
    MAX_FINDINGS,
    Breakdown,
    Finding,
    StepTime,
    Straggler,
    Summary,
)
from stepscope_operator.sessions.following import PodObservation
from stepscope_operator.targets.resolving import RankTarget

# Condition types. Ready is the one to wait on: True once the session ended with a result.
READY = "Ready"
TARGET_RESOLVED = "TargetResolved"
ARMED = "Armed"
CAPTURED = "Captured"
ANALYZED = "Analyzed"
# The status's bound on MFU (stepscope.api.verdict.Summary.mfu_pct).
MAX_MFU_PCT = 1000.0

# Every phase but the final ones reads as "in progress" on the Ready condition.
_PROGRESS_MESSAGES = {
    Phase.PENDING: "waiting to start",
    Phase.PLANNING: "resolving the target, probing the agents and planning the window",
    Phase.ARMED: "agents armed; waiting for the ranks to reach the start step",
    Phase.CAPTURING: "ranks are capturing the window",
    Phase.COLLECTING: "collecting per-rank results",
    Phase.ANALYZING: "merging ranks and writing the report",
    Phase.WATCHING: "watching the job's step progress for a hang",
    Phase.DIAGNOSING: "asking every rank for stacks and flight-recorder dumps",
}

# The analysis names categories after Breakdown fields; the API uses words for people.
_BOTTLENECKS = {
    "compute": "compute",
    "comm_exposed": "communication",
    "data_loading": "data-loading",
    "host_overhead": "host-overhead",
    "idle": "idle",
    "straggler": "straggler",
    "slow_node": "slow-node",
    "jitter": "jitter",
}


class RankOutcome(BaseModel):
    """How one rank's capture ended, as the operator judges it."""

    rank: int
    pod: str
    verdict: str  # captured | misaligned | failed | missing
    reason: str | None = None  # words for people
    failure: CaptureFailure | None = None  # the agent's failure, when it reported one
    summary: CaptureSummary | None = None
    first_step: int | None = None
    last_step: int | None = None


def judge_ranks(
    targets: Iterable[RankTarget],
    observations: Mapping[str, PodObservation],
    start_step: int,
    end_step: int,
) -> list[RankOutcome]:
    """One outcome per expected rank: captured exactly the window, misaligned (a different
    step range), failed (the agent says so, or it was still busy at the deadline) or
    missing (no answer about it at all)."""
    outcomes = []
    for target in sorted(targets, key=lambda t: t.rank):
        observed = observations.get(target.pod)
        rank_status = _rank_status(observed, target.rank)
        if rank_status is None:
            reason = (
                observed.error
                if observed and observed.error
                else (f"the agent in pod {target.pod} reported nothing for rank {target.rank}")
            )
            outcomes.append(
                RankOutcome(rank=target.rank, pod=target.pod, verdict="missing", reason=reason)
            )
            continue
        common = {
            "rank": target.rank,
            "pod": target.pod,
            "summary": rank_status.summary,
            "first_step": rank_status.first_step,
            "last_step": rank_status.last_step,
        }
        if rank_status.state == CaptureState.DONE:
            if (rank_status.first_step, rank_status.last_step) == (start_step, end_step):
                outcomes.append(RankOutcome(verdict="captured", **common))
            else:
                outcomes.append(
                    RankOutcome(
                        verdict="misaligned",
                        reason=f"captured steps {rank_status.first_step}-{rank_status.last_step}, "
                        f"not {start_step}-{end_step}",
                        **common,
                    )
                )
        elif rank_status.state in (
            CaptureState.FAILED,
            CaptureState.CANCELLED,
            CaptureState.NOT_REACHED,
        ):
            reason = rank_status.reason or observed.capture.reason or rank_status.state.value
            outcomes.append(
                RankOutcome(
                    verdict="failed",
                    reason=f"{rank_status.state.value}: {reason}",
                    failure=rank_status.failure,
                    **common,
                )
            )
        else:
            outcomes.append(
                RankOutcome(
                    verdict="failed",
                    reason=f"still {rank_status.state.value} at the deadline",
                    **common,
                )
            )
    return outcomes


def _rank_status(observed: PodObservation | None, rank: int) -> RankCaptureStatus | None:
    if observed is None or observed.capture is None:
        return None
    return next((r for r in observed.capture.ranks if r.rank == rank), None)


def tally_ranks(outcomes: list[RankOutcome]) -> RanksStatus:
    missing = sorted((o for o in outcomes if o.verdict == "missing"), key=lambda o: o.rank)
    return RanksStatus.tally(
        missing_reason=missing[0].reason if missing else None,
        expected=len(outcomes),
        captured=sum(o.verdict == "captured" for o in outcomes),
        misaligned=sum(o.verdict == "misaligned" for o in outcomes),
        missing=[RankRef(rank=o.rank, pod=o.pod) for o in outcomes if o.verdict == "missing"],
        failed=[
            RankFailure(
                rank=o.rank,
                pod=o.pod,
                reason=o.reason or "failed",
                code=o.failure.code if o.failure else None,
            )
            for o in outcomes
            if o.verdict == "failed"
        ],
    )


def final_phase(ranks: RanksStatus) -> tuple[Phase, Reason, str]:
    """(phase, reason, message) once every rank is judged."""
    if ranks.expected and ranks.captured == ranks.expected:
        return (
            Phase.SUCCEEDED,
            Reason.ALL_RANKS_CAPTURED,
            f"all {ranks.expected} ranks captured the window",
        )
    problems = describe_rank_problems(ranks)
    if ranks.captured:
        return (
            Phase.PARTIALLY_SUCCEEDED,
            Reason.SOME_RANKS_MISSING,
            f"{ranks.captured} of {ranks.expected} ranks captured the window; {problems}",
        )
    return Phase.FAILED, Reason.NO_RANK_CAPTURED, f"no rank captured the window; {problems}"


def describe_rank_problems(ranks: RanksStatus) -> str:
    """The ranks that did not capture, in ranges so the text stays short at any job size:
    'ranks 17-19, 512 (4 of 1024) missing: pods ddp-worker-16..18, ddp-worker-511'. The
    first missing rank's and the first failure's reasons are quoted; the others are in
    status.ranks.failed and the report."""
    parts = []
    if ranks.missing_ranges:
        first = ranks.missing[0] if ranks.missing and ranks.missing_reason else None
        quoted = f" (rank {first.rank}: {ranks.missing_reason})" if first else ""
        parts.append(f"{ranks.missing_ranges}{quoted}")
    if ranks.failed_ranges:
        first = ranks.failed[0] if ranks.failed else None
        quoted = f" (rank {first.rank}: {first.reason})" if first else ""
        parts.append(f"{ranks.failed_ranges}{quoted}")
    if ranks.misaligned:
        parts.append(f"{ranks.misaligned} misaligned (captured other steps)")
    return "; ".join(parts) or "no rank reported"


def summary_from_job(job: JobSummary, unprofiled_step_ms: float | None = None) -> Summary:
    """The analysed job in the status's small shape; the report holds the rest.

    `unprofiled_step_ms` is the agents' recent median step time before the window (from the
    planning probe); the profiler's overhead is how much slower the captured steps ran.
    """
    step_time = _step_time(job)
    mean = job.mean_breakdown
    timings_only = step_timings_only(job)
    overhead = None
    if step_time is not None and unprofiled_step_ms:
        overhead = _pct(100.0 * (step_time.p50 / unprofiled_step_ms - 1.0))
    return Summary(
        step_time_ms=step_time,
        profiler_overhead_pct=overhead,
        breakdown=_breakdown(job, timings_only),
        overlap=_pct(100.0 * mean.comm_overlapped_ms / mean.comm_ms) if mean.comm_ms > 0 else None,
        straggler=_straggler(job),
        steps_to_decide=_steps_to_decide(job),
        **_bottleneck(job, timings_only),
        findings=_findings(job),
        gpu=gpu_counters_status(job.counters),
        memory=memory_peak_status(job),
        critical_path=critical_path_status(job),
        **_efficiency(job),
    )


def _efficiency(job: JobSummary) -> dict:
    """MFU and the scaler's skipped steps, when the traces measured them."""
    efficiency = job.efficiency
    if efficiency is None:
        return {}
    # The figures come from tenant-written summaries: only a finite, plausible MFU reaches
    # the status (above 100% is possible: fp32 work on TF32 tensor cores).
    mfu = efficiency.median_mfu_pct
    plausible = mfu is not None and math.isfinite(mfu) and 0.0 <= mfu <= MAX_MFU_PCT
    skipped = [row.skipped_count for row in efficiency.skipped_steps]
    return {
        "mfu_pct": round(mfu, 2) if plausible else None,
        "skipped_steps": sum(skipped) if skipped else None,
    }


def _steps_to_decide(job: JobSummary) -> int | None:
    """From the finding that says the window could not decide, how many steps would."""
    for finding in job.findings:
        steps = finding.evidence.numbers.get("steps_to_decide")
        if steps is not None:
            return min(int(steps), 100_000)
    return None


def _step_time(job: JobSummary) -> StepTime | None:
    """Median and p95 over every rank's steps of the window all ranks recorded."""
    durations = [
        step.duration_ms
        for rank in job.ranks
        for step in rank.steps
        if not job.common_steps or step.step in job.common_steps
    ]
    if not durations:
        return None
    return StepTime(p50=round(statistics.median(durations), 3), p95=round(_p95(durations), 3))


def _breakdown(job: JobSummary, timings_only: bool) -> Breakdown | None:
    # From step timings alone, compute is compute-or-unattributed: a breakdown would claim
    # 0% communication, so the status gives none and the findings say what was measured.
    mean = job.mean_breakdown
    if mean.total_ms <= 0 or timings_only:
        return None
    return Breakdown(
        compute=_pct(mean.percent("compute_ms")),
        exposed_communication=_pct(mean.percent("comm_exposed_ms")),
        data_loading=_pct(mean.percent("data_loading_ms")),
        host_overhead=_pct(mean.percent("host_overhead_ms")),
        idle=_pct(mean.percent("idle_ms")),
        waiting_for_peers=(
            _pct(100.0 * min(job.wait_ms, mean.comm_exposed_ms) / mean.total_ms)
            if job.alignment is not None
            else None
        ),
    )


def _straggler(job: JobSummary) -> Straggler | None:
    if job.straggler is None:
        return None
    placed = job.placement.get(job.straggler.rank)
    return Straggler(
        rank=job.straggler.rank,
        pod=placed.pod if placed else None,
        node=job.straggler.node or (placed.node if placed else None),
        excess_ms=max(0.0, round(job.straggler.excess_ms, 3)),
        confidence=round(min(1.0, max(0.0, 1.0 - job.straggler.p_value)), 3),
    )


def _findings(job: JobSummary) -> list[Finding]:
    """The findings that cost the most step time first, at most MAX_FINDINGS."""
    ranked = sorted(job.findings, key=lambda f: (-f.impact_pct, -f.severity.order))
    return [
        Finding(
            id=f.id,
            severity=f.severity.value,
            evidence=_clip(f.evidence.text, FINDING_TEXT_MAX_LENGTH),
            recommendation=_clip(f.recommendation, FINDING_TEXT_MAX_LENGTH),
            confidence=f.confidence,
        )
        for f in ranked[:MAX_FINDINGS]
    ]


def step_timings_only(job: JobSummary) -> bool:
    """True when every rank's summary says it was made from step timings alone (the steps
    tier, whose row in the tier table takes no trace, or traces that could not be
    summarised): only step times are known."""
    return bool(job.ranks) and all(is_step_timings(rank) for rank in job.ranks)


def verdict_line(job: JobSummary, summary: Summary) -> str:
    """The verdict in one line, for the Ready condition and the session's Events. A named
    straggler carries its lateness test's p-value, so a reader can weigh it."""
    if step_timings_only(job):
        data_share = job.mean_breakdown.percent("data_loading_ms")
        line = (
            f"step timings only: median step {summary.step_time}, {data_share:.0f}% data wait; "
            "communication is not separated from compute at this tier (use granularity ops)"
        )
    else:
        line = f"bottleneck {summary.bottleneck}, median step {summary.step_time}"
    straggler = summary.straggler
    if straggler is not None:
        line += f", straggler rank {straggler.rank} (pod {straggler.pod}"
        if straggler.confidence is not None:
            p_value = 1 - straggler.confidence
            line += ", p<0.001" if p_value < 0.001 else f", p={p_value:.2g}"
        line += ")"
    return line


def _bottleneck(job: JobSummary, timings_only: bool) -> dict[str, str | None]:
    """The status's bottleneck and, when it is unknown, the reason. Step timings can only
    show a data-loading bottleneck; anything else they cannot tell apart."""
    if timings_only and job.bottleneck != "data_loading":
        reason = (
            "step timings alone cannot tell compute from communication; "
            "profile with granularity ops to attribute the step"
        )
    elif job.bottleneck in _BOTTLENECKS:
        return {"bottleneck": _BOTTLENECKS[job.bottleneck], "bottleneck_reason": None}
    else:
        reason = (
            job.bottleneck_reason or f"the analysis named no known bottleneck ({job.bottleneck})"
        )
    return {"bottleneck": "unknown", "bottleneck_reason": _clip(reason, FINDING_TEXT_MAX_LENGTH)}


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """Conditions with `type_` set; lastTransitionTime moves only when the status flips."""
    previous = next((c for c in conditions if c.type == type_), None)
    changed_at = previous.last_transition_time if previous and previous.status == status else now
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=_clip(message, CONDITION_MESSAGE_MAX_LENGTH),
        observed_generation=generation,
        last_transition_time=changed_at,
    )
    return [c for c in conditions if c.type != type_] + [updated]


def ready_condition(
    phase: Phase, reason: Reason | None, message: str | None
) -> tuple[str, str, str]:
    """(status, reason, message) of Ready for a phase; without a reason, the phase's name
    is the reason, as kubectl shows it."""
    if phase in (Phase.SUCCEEDED, Phase.PARTIALLY_SUCCEEDED, Phase.DIAGNOSED):
        return "True", reason or phase, message or phase
    if phase == Phase.FAILED:
        return "False", reason or phase, message or "the session failed"
    return "False", reason or phase, message or _PROGRESS_MESSAGES.get(phase, phase)


def phase_event(phase: Phase, message: str) -> tuple[str, str, str]:
    """(event type, reason, message) for entering `phase`: Warning when it ends badly."""
    warn = (Phase.FAILED, Phase.PARTIALLY_SUCCEEDED, Phase.DIAGNOSED)
    kind = "Warning" if phase in warn else "Normal"
    return kind, phase, _clip(message, 1024)


def is_final(phase: str | None) -> bool:
    return phase in TERMINAL_PHASES


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * (len(ordered) - 1))))]


def _pct(value: float) -> float:
    return round(min(100.0, max(0.0, value)), 2)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
