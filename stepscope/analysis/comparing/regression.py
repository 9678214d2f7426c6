"""What changed between a baseline and a session: the causes of a step-time change. Pure.

Everything is time per step, averaged over ranks (and over baseline sessions), read from
what the job summaries already hold: the five-way breakdown (compute, exposed
communication, data loading, host overhead, idle; they sum to the step), the top CPU ops
and GPU kernels by self time, the collectives by name, and the straggler and slow node.

Causes are ranked in the direction of the change (the largest growth first when the
session is slower, the largest drop first when faster, the largest either way when the
step time did not change but its make-up did), and each carries its share of the
step-time change. A name in one side's top list but not the other's is compared with the
smallest listed time of that side, a bound, and flagged as such: the summaries keep only
the top entries. Changes under ``MIN_CAUSE_PCT`` of the step are not causes: they are
below what a single session measures reliably.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from stepscope.analysis.comparing.step_comparison import (
    MIN_BASELINE_SESSIONS,
    Cause,
    Comparison,
    Explanation,
    compare_sessions,
    session_steps,
)
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import TOP_N, Breakdown, OpStat, RankSummary

# scipy.stats is imported in the function that uses it, as in step_comparison.py (why there).

MIN_CAUSE_PCT = 1.0
MAX_CAUSES = 5
# An Event's message, and what a name takes of it.
HEADLINE_MAX_LENGTH = 300
NAME_MAX_LENGTH = 60
CATEGORY_NAMES = {
    "compute_ms": "compute",
    "comm_exposed_ms": "exposed communication",
    "data_loading_ms": "data loading",
    "host_overhead_ms": "host overhead",
    "idle_ms": "idle",
}

# name -> (time per step, whether it is an upper bound rather than a measurement)
PerStep = dict[str, tuple[float, bool]]


def _steps(rank: RankSummary) -> int:
    return max(1, sum(1 for s in rank.steps if s.step >= 0) or len(rank.steps))


def _listed(entries: Sequence[OpStat], rank: RankSummary, full: bool) -> PerStep:
    per = {e.name: (e.self_ms / _steps(rank), False) for e in entries}
    if full and entries:
        # The list is cut at TOP_N: an absent name took at most the smallest listed time.
        per["\0floor"] = (min(v for v, _ in per.values()), True)
    return per


def _rank_ops(rank: RankSummary) -> PerStep:
    return _listed(rank.top_ops, rank, len(rank.top_ops) >= TOP_N)


def _rank_kernels(rank: RankSummary) -> PerStep:
    return _listed(rank.top_kernels, rank, len(rank.top_kernels) >= TOP_N)


def _rank_collectives(rank: RankSummary) -> PerStep:
    # collective_stats is uncapped: an absent name really did not run.
    return {c.name: (c.total_ms / _steps(rank), False) for c in rank.collective_stats}


def _tables(jobs: Sequence[JobSummary], read: Callable[[RankSummary], PerStep]) -> list[PerStep]:
    return [read(rank) for job in jobs for rank in job.ranks]


def _average(tables: Sequence[PerStep], names: set[str]) -> PerStep:
    """Mean per step over the ranks' tables; a name absent from a rank's cut list takes
    that rank's floor (a bound), absent from an uncut one 0."""
    result: PerStep = {}
    for name in names:
        values, bound = [], False
        for table in tables:
            value, is_bound = table.get(name) or table.get("\0floor") or (0.0, False)
            values.append(value)
            bound |= is_bound
        result[name] = (statistics.fmean(values), bound)
    return result


def _category_steps(job: JobSummary, category: str) -> list[float]:
    """Per common step, the median over ranks of one breakdown category."""
    common = set(job.common_steps)
    by_step: dict[int, list[float]] = {}
    for rank in job.ranks:
        for step in rank.steps:
            if step.step >= 0 and (not common or step.step in common):
                by_step.setdefault(step.step, []).append(getattr(step.breakdown, category))
    return [statistics.median(v) for _, v in sorted(by_step.items())]


def _category_p(after: JobSummary, before: Sequence[JobSummary], category: str) -> float | None:
    current = _category_steps(after, category)
    reference = [v for job in before for v in _category_steps(job, category)]
    if len(current) < 2 or len(reference) < 2 or len(set(current + reference)) < 2:
        return None
    from scipy import stats

    return round(float(stats.mannwhitneyu(current, reference).pvalue), 6)


def _mean_breakdown(jobs: Sequence[JobSummary]) -> Breakdown:
    total = Breakdown()
    for job in jobs:
        total = total + job.mean_breakdown
    return Breakdown(**{k: v / len(jobs) for k, v in total.model_dump().items() if k != "percents"})


def _cause(kind: str, name: str, before: float, after: float, step_ms: float, **extra) -> Cause:
    delta = after - before
    pct = 100.0 * delta / step_ms if step_ms > 0 else 0.0
    return Cause(
        kind=kind,
        name=name,
        before_ms=round(before, 3),
        after_ms=round(after, 3),
        delta_ms=round(delta, 3),
        pct_of_step=round(pct, 2),
        **extra,
    )


def _named_causes(kind: str, before: PerStep, after: PerStep, step_ms: float) -> list[Cause]:
    causes = []
    for name in before.keys() | after.keys():
        b, b_bound = before.get(name, (0.0, False))
        a, a_bound = after.get(name, (0.0, False))
        if a_bound:
            continue  # bounded after the change: no measured growth to report
        causes.append(_cause(kind, name, b, a, step_ms, before_is_bound=b_bound))
    return causes


def _node_causes(after: JobSummary, before: Sequence[JobSummary], step_ms: float) -> list[Cause]:
    causes = []
    if after.straggler is not None:
        s = after.straggler
        earlier = [
            j.straggler.excess_ms for j in before if j.straggler and j.straggler.rank == s.rank
        ]
        where = f"rank {s.rank}" + (f" on node {s.node}" if s.node else "")
        was = statistics.fmean(earlier) if len(earlier) == len(before) else 0.0
        causes.append(_cause("straggler", where, was, s.excess_ms, step_ms))
    if after.slow_node is not None:
        n = after.slow_node
        earlier = [j.slow_node.gap_ms for j in before if j.slow_node and j.slow_node.node == n.node]
        was = statistics.fmean(earlier) if len(earlier) == len(before) else 0.0
        causes.append(_cause("slow_node", f"node {n.node}", was, n.gap_ms, step_ms))
    return causes


def explain(after: JobSummary, before: Sequence[JobSummary], verdict: str) -> Explanation:
    """Per-step changes from the baseline jobs to `after`, ranked (see the module docstring)."""
    base, now = _mean_breakdown(before), after.mean_breakdown
    step_ms = base.total_ms
    change = now.total_ms - base.total_ms
    categories = [
        _cause(
            "category",
            label,
            getattr(base, field),
            getattr(now, field),
            step_ms,
            p_value=_category_p(after, before, field),
        )
        for field, label in CATEGORY_NAMES.items()
    ]
    readers = (("op", _rank_ops), ("kernel", _rank_kernels), ("collective", _rank_collectives))
    named = []
    for kind, read in readers:
        old_tables, new_tables = _tables(before, read), _tables([after], read)
        names = {n for t in (*old_tables, *new_tables) for n in t if n != "\0floor"}
        named += _named_causes(
            kind, _average(old_tables, names), _average(new_tables, names), step_ms
        )
    named += _node_causes(after, before, step_ms)
    direction = {"regression": 1.0, "improvement": -1.0}.get(verdict)

    def order(cause: Cause) -> float:
        return -cause.delta_ms * direction if direction else -abs(cause.delta_ms)

    def shared(cause: Cause) -> Cause:
        if direction is None or change == 0:
            return cause
        return cause.model_copy(update={"share_pct": round(100.0 * cause.delta_ms / change, 1)})

    categories = [shared(c) for c in sorted(categories, key=order)]
    relevant = [c for c in named if abs(c.pct_of_step) >= MIN_CAUSE_PCT]
    if direction:
        relevant = [c for c in relevant if c.delta_ms * direction > 0]
    causes = [c for c in categories if abs(c.pct_of_step) >= MIN_CAUSE_PCT][:2]
    causes += [shared(c) for c in sorted(relevant, key=order)][: MAX_CAUSES - len(causes)]
    return Explanation(
        before_step_ms=round(base.total_ms, 3),
        after_step_ms=round(now.total_ms, 3),
        categories=categories,
        causes=causes,
    )


def describe(cause: Cause) -> str:
    before = ("≤" if cause.before_is_bound else "") + f"{cause.before_ms:.1f}"
    name = cause.name if len(cause.name) <= NAME_MAX_LENGTH else cause.name[:NAME_MAX_LENGTH] + "…"
    text = f"{name} {before} → {cause.after_ms:.1f} ms/step ({cause.delta_ms:+.1f})"
    if cause.kind in ("straggler", "slow_node"):
        text = f"{cause.kind.replace('_', ' ')} {text}"
    return text + (f", {cause.share_pct:.0f}% of the change" if cause.share_pct is not None else "")


def verdict_phrase(comparison: Comparison) -> str:
    """`slower by 15.2% (95% CI 12.1..18.4%, p=0.0004)`, `no significant change (...)`."""
    if comparison.verdict == "inconclusive" or comparison.delta_pct is None:
        return f"inconclusive ({comparison.reason})"
    c = comparison
    detail = (
        f"95% CI {c.ci_low_pct:+.1f}..{c.ci_high_pct:+.1f}%, p={c.p_value:.2g}, "
        f"noise band {c.noise_band_pct:.1f}%"
    )
    if c.verdict == "regression":
        return f"slower by {c.delta_pct:.1f}% ({detail})"
    if c.verdict == "improvement":
        return f"faster by {-c.delta_pct:.1f}% ({detail})"
    return f"no significant change ({c.delta_pct:+.1f}%, {detail})"


def headline(comparison: Comparison, explanation: Explanation | None) -> str:
    """One line for an Event: the verdict, then the two largest causes."""
    line = verdict_phrase(comparison)
    if explanation and explanation.causes:
        line += ": " + "; ".join(describe(c) for c in explanation.causes[:2])
    return line[:HEADLINE_MAX_LENGTH]


def compare_jobs(
    current: tuple[str, JobSummary],
    baseline: Sequence[tuple[str, JobSummary]],
    threshold_pct: float,
    min_baseline_sessions: int = MIN_BASELINE_SESSIONS,
) -> Comparison:
    """The verdict of one session against baseline sessions, explained: the statistics of
    `step_comparison` plus the causes, with the headline an Event shows."""
    result = compare_sessions(
        session_steps(*current),
        [session_steps(name, job) for name, job in baseline],
        threshold_pct,
        min_baseline_sessions,
    )
    if result.verdict == "inconclusive":
        return result
    explanation = explain(current[1], [job for _, job in baseline], result.verdict)
    return result.model_copy(
        update={"explanation": explanation, "headline": headline(result, explanation)}
    )
