"""Judge several windows of one session together (`spec.window.repeat`).

Each window is merged alone first (`merge_ranks`), with every rule of a single window. The
windows are separate captures of the same job, some steps apart, so under the lateness
test's null hypothesis (no rank slower than another) their p-values are independent, and
the question a repeat answers is whether a rank is late *every time it is asked*:

* A rank is a **straggler across windows** only when it is late in every window (the
  single-window test's late: Šidák-adjusted p <= 0.1, excess >= 5% of the step and above
  the step noise) **and** the windows' p-values together, by Fisher's method
  (X = -2 Σ ln p_i, chi-square with 2k degrees of freedom under the null), reach the
  headline bar p <= 0.01. Several such ranks: the one with the largest median excess is
  the straggler, the others are listed with it. A slow node is kept when every window
  named the same node.
* A rank late in some windows but not all, or in all with a combined p above the bar, is
  a low `late-in-some-windows` finding that says in which windows, and nobody's headline:
  the wait is named by nobody, as for an undecided window.

Everything else is pooled: the combined summary's ranks hold every window's steps (so step
times, and a schedule's regression test, use all of them), the breakdown and the wait are
the windows' means, the median step is the median of the windows' medians; findings other
than lateness come from the last window, which the report and merged trace also show.
"""

from __future__ import annotations

import math
import statistics

from stepscope.analysis.findings.wait import listed, p_text, straggler_or_slow_node
from stepscope.analysis.merging.deciding import HEADLINE_MAX_P
from stepscope.analysis.merging.merge import name_bottleneck, scaled_breakdown
from stepscope.analysis.model.job_summary import (
    Evidence,
    Finding,
    JobSummary,
    LatenessPattern,
    RankArrival,
    Severity,
    StepRange,
    Straggler,
    WindowVerdict,
)
from stepscope.analysis.model.rank_summary import Breakdown

# The findings a single window writes about who is late; across windows they are judged again.
LATENESS_FINDINGS = frozenset(
    {"straggler-rank", "possible-straggler", "late-ranks", "slow-node", "rotating-lateness"}
)
# Ranks named in the late-in-some-windows finding; the count says how many there were.
LISTED_PARTLY_LATE = 10


def fisher_p(p_values: list[float]) -> float:
    """Fisher's combined p: the chance, with no rank slower than another in any window, of
    windows whose p-values multiply to this little. The chi-square tail with 2k degrees of
    freedom has the closed form exp(-x/2) Σ_{j<k} (x/2)^j / j!."""
    if not p_values:
        return 1.0
    half = -sum(math.log(max(p, 1e-300)) for p in p_values)
    term = total = 1.0
    for j in range(1, len(p_values)):
        term *= half / j
        total += term
    return min(1.0, math.exp(-half) * total)


def window_verdict(index: int, job: JobSummary) -> WindowVerdict:
    steps = [r.step for rank in job.ranks for r in rank.steps if r.step >= 0]
    return WindowVerdict(
        window=index,
        first_step=min(steps, default=None),
        last_step=max(steps, default=None),
        ranks=job.world_size,
        median_step_ms=job.median_step_ms,
        straggler=job.straggler.rank if job.straggler else None,
        late_ranks=list(job.late_ranks),
        bottleneck=job.bottleneck,
    )


def combine_windows(windows: list[JobSummary], numbers: list[int] | None = None) -> JobSummary:
    """One summary judging `windows` (in capture order) together; one window is itself.
    `numbers` are the windows' places in the sequence (1, 2, ... unless some were left out)."""
    if not windows:
        raise ValueError("no windows to combine")
    if len(windows) == 1:
        return windows[0]
    numbers = list(numbers or range(1, len(windows) + 1))
    base = windows[-1]
    combined = base.model_copy(deep=True)
    _pool_steps(combined, windows)
    combined.median_step_ms = round(statistics.median(w.median_step_ms for w in windows), 3)
    combined.mean_breakdown = scaled_breakdown(
        sum((w.mean_breakdown for w in windows), Breakdown()), 1.0 / len(windows)
    )
    combined.wait_ms = round(statistics.fmean(w.wait_ms for w in windows), 3)
    combined.windows = [window_verdict(n, w) for n, w in zip(numbers, windows, strict=True)]
    persistent, partly = _judge_ranks_across(windows)
    common_node = _common_slow_node(windows)
    combined.straggler, combined.slow_node, combined.late_group = None, None, None
    if common_node is not None:
        combined.slow_node = base.slow_node
        combined.late_ranks = list(base.slow_node.ranks)
        combined.lateness_pattern = LatenessPattern.slow_node
        persistent = [r for r in persistent if r not in combined.late_ranks]
    elif persistent:
        combined.straggler = _straggler(combined, windows, persistent[0])
        combined.late_ranks = list(persistent)
        combined.lateness_pattern = LatenessPattern.straggler
    else:
        combined.late_ranks = []
        if base.lateness_pattern is not LatenessPattern.rotating:
            combined.lateness_pattern = LatenessPattern.none
    partly = [r for r in partly if r not in combined.late_ranks]
    decided = bool(combined.late_ranks) or not partly
    combined.bottleneck, combined.bottleneck_reason = name_bottleneck(
        combined.mean_breakdown, combined.wait_ms, combined.lateness_pattern, decided=decided
    )
    findings = [
        f
        for f in base.findings
        if f.id not in LATENESS_FINDINGS
        or (f.id == "rotating-lateness" and combined.lateness_pattern is LatenessPattern.rotating)
    ]
    headline = straggler_or_slow_node(combined)
    if headline is not None:
        findings.append(_across(headline, windows, numbers, combined.late_ranks[:1]))
    if partly:
        findings.append(_partly_late(windows, numbers, partly))
    combined.findings = sorted(findings, key=lambda f: (-f.severity.order, -f.impact_pct, f.id))
    ranges = ", ".join(f"{w.first_step}-{w.last_step}" for w in combined.windows)
    combined.notes = [
        *base.notes,
        f"judged across {len(windows)} windows (steps {ranges}); findings other than "
        "lateness, the report and the merged trace are the last window's",
    ]
    return combined


def _arrival(job: JobSummary, rank: int) -> RankArrival | None:
    return next((a for a in job.arrivals if a.rank == rank), None)


def _judge_ranks_across(windows: list[JobSummary]) -> tuple[list[int], list[int]]:
    """(ranks late in every window at a combined p within the bar, by median excess,
    largest first; ranks late in some window that are not)."""
    candidates = sorted({r for w in windows for r in w.late_ranks})
    persistent, partly = [], []
    for rank in candidates:
        late_everywhere = all(rank in w.late_ranks for w in windows)
        if late_everywhere and _combined_p(windows, rank) <= HEADLINE_MAX_P:
            persistent.append(rank)
        else:
            partly.append(rank)
    persistent.sort(key=lambda r: -statistics.median(_excesses(windows, r)))
    return persistent, partly


def _combined_p(windows: list[JobSummary], rank: int) -> float:
    # A window where the rank was not compared gives no evidence: p = 1.
    arrivals = (_arrival(w, rank) for w in windows)
    return fisher_p([a.p_value if a is not None else 1.0 for a in arrivals])


def _excesses(windows: list[JobSummary], rank: int) -> list[float]:
    return [a.excess_ms if (a := _arrival(w, rank)) else 0.0 for w in windows]


def _common_slow_node(windows: list[JobSummary]) -> str | None:
    nodes = {w.slow_node.node if w.slow_node else None for w in windows}
    return next(iter(nodes)) if len(nodes) == 1 else None


def _straggler(combined: JobSummary, windows: list[JobSummary], rank: int) -> Straggler:
    arrivals = [a for w in windows if (a := _arrival(w, rank)) is not None]
    samples = sum(a.samples for a in arrivals) or 1
    excess = statistics.median(a.excess_ms for a in arrivals)
    step = combined.median_step_ms
    placement = combined.placement.get(rank)
    return Straggler(
        rank=rank,
        node=placement.node if placement else None,
        median_lag_ms=round(statistics.median(a.median_lag_ms for a in arrivals), 3),
        excess_ms=round(excess, 3),
        excess_pct_of_step=round(100.0 * excess / step, 2) if step > 0 else 0.0,
        robust_z=round(statistics.median(a.robust_z for a in arrivals), 3),
        last_arrival_fraction=round(
            sum(a.last_arrival_fraction * a.samples for a in arrivals) / samples, 4
        ),
        late_step_fraction=round(
            sum(a.late_step_fraction * a.samples for a in arrivals) / samples, 4
        ),
        p_value=_combined_p(windows, rank),
        steps=sum(a.samples for a in arrivals),
    )


def _per_window(windows: list[JobSummary], numbers: list[int], rank: int) -> str:
    parts = []
    for index, window in zip(numbers, windows, strict=True):
        arrival = _arrival(window, rank)
        if arrival is None:
            parts.append(f"window {index}: not compared")
            continue
        share = 100.0 * arrival.excess_ms / window.median_step_ms if window.median_step_ms else 0
        share = round(share) or 0  # never "-0%"
        late = "late" if rank in window.late_ranks else "not late"
        parts.append(f"window {index}: {late}, {share:.0f}% of the step, p={arrival.p_value:.2g}")
    return "; ".join(parts)


def _across(
    finding: Finding, windows: list[JobSummary], numbers: list[int], ranks: list[int]
) -> Finding:
    """The headline finding, saying that every window agreed."""
    rank = ranks[0] if ranks else finding.ranks[0]
    text = (
        f"{finding.evidence.text} Late in all {len(windows)} windows "
        f"({_per_window(windows, numbers, rank)}); the windows together give p="
        f"{p_text(_combined_p(windows, rank))} (Fisher's method)."
    )
    numbers = {
        **finding.evidence.numbers,
        "windows": float(len(windows)),
        "windows_late": float(len(windows)),
        "combined_p_value": _combined_p(windows, rank),
    }
    return finding.model_copy(update={"evidence": Evidence(text=text, numbers=numbers)})


def _partly_late(windows: list[JobSummary], numbers: list[int], ranks: list[int]) -> Finding:
    """A low finding for ranks late in some windows only (or in all, below the bar)."""
    shown = ranks[:LISTED_PARTLY_LATE]
    lines = []
    for rank in shown:
        late = sum(rank in w.late_ranks for w in windows)
        together = p_text(_combined_p(windows, rank))
        lines.append(
            f"rank {rank} was late in {late} of {len(windows)} windows "
            f"({_per_window(windows, numbers, rank)}; together p={together})"
        )
    more = f"; and {len(ranks) - len(shown)} more rank(s)" if len(ranks) > len(shown) else ""
    worst = max(ranks, key=lambda r: max(_excesses(windows, r)))
    share = max(
        100.0 * e / w.median_step_ms if w.median_step_ms else 0.0
        for w, e in zip(windows, _excesses(windows, worst), strict=True)
    )
    return Finding(
        id="late-in-some-windows",
        severity=Severity.low,
        title=(
            f"{listed(ranks).capitalize()} late in some windows only: not a straggler across "
            "windows"
        ),
        evidence=Evidence(
            text=(
                "; ".join(lines) + more + ". A straggler across windows must be late in every "
                f"window with a combined p<={HEADLINE_MAX_P:g}."
            ),
            numbers={
                "windows": float(len(windows)),
                "ranks": float(len(ranks)),
                "max_excess_pct_of_step": round(share, 2),
            },
        ),
        confidence=0.5,
        recommendation=(
            "Do not act on these ranks yet: a rank late in one window is often a passing "
            "stall (another job on the host, a descheduled thread). Repeat the session, or "
            "capture more windows, and act when one is late in every window."
        ),
        impact_pct=round(share, 2),
        ranks=shown,
    )


def _pool_steps(combined: JobSummary, windows: list[JobSummary]) -> None:
    """Every window's steps on each rank of the last window, and the steps all ranks shared
    in each window: step times (and a schedule's regression test) read all windows."""
    steps: dict[int, dict[int, object]] = {}
    for window in windows:
        for rank in window.ranks:
            mine = steps.setdefault(rank.rank, {})
            for record in rank.steps:
                mine.setdefault(record.step, record)
    combined.ranks = [
        r.model_copy(update={"steps": [steps[r.rank][s] for s in sorted(steps[r.rank])]})
        for r in combined.ranks
    ]
    combined.common_steps = sorted({s for w in windows for s in w.common_steps})
    combined.step_lateness = [entry for w in windows for entry in w.step_lateness]
    combined.step_imbalance = [entry for w in windows for entry in w.step_imbalance]
    combined.step_ranges = [
        StepRange(
            rank=r.rank,
            first_step=min((s.step for s in r.steps if s.step >= 0), default=None),
            last_step=max((s.step for s in r.steps if s.step >= 0), default=None),
            steps=sum(1 for s in r.steps if s.step >= 0),
        )
        for r in combined.ranks
    ]
