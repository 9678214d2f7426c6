"""The report's answer, first: one sentence with its confidence, then step time and where it goes.

A reader opens the report to learn what holds the job back. The sentence is the top
finding's (findings are ordered by what they cost), said as a claim with its size in the
units a person thinks in; a straggler is named with its pod and node when the caller knows
them, since that is what someone goes to look at next. Below it, the median step time and
the mean step split into the five categories as one bar, so the claim can be weighed
against the whole step before any figure is read.
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.model.job_summary import Finding, JobSummary, Straggler
from stepscope.analysis.model.rank_summary import Breakdown
from stepscope.analysis.reports.plots import CATEGORY_COLORS, CATEGORY_LABELS

STRAGGLER_FINDING = "straggler-rank"


def _where(job: JobSummary, rank: int) -> str:
    """' (pod P on node N)' for a rank the placement knows, else ''."""
    where = job.placement.get(rank)
    if where is None:
        return ""
    parts = [f"pod {where.pod}" if where.pod else "", f"node {where.node}" if where.node else ""]
    said = " on ".join(p for p in parts if p)
    return f" ({said})" if said else ""


def _straggler_sentence(job: JobSummary, lag: Straggler, finding: Finding) -> str:
    return (
        f"Rank {lag.rank}{_where(job, lag.rank)} is a straggler: it reaches collectives "
        f"{lag.excess_ms:.1f} ms ({lag.excess_pct_of_step:.0f}% of the step) after the median "
        f"rank; confidence {finding.confidence:.2f}."
    )


def bottleneck_text(job: JobSummary) -> str:
    """The bottleneck in words, with why it is unknown when it is."""
    text = job.bottleneck.replace("comm_exposed", "exposed communication").replace("_", " ")
    return f"{text} ({job.bottleneck_reason})" if job.bottleneck_reason else text


def verdict_sentence(job: JobSummary) -> str:
    """One sentence that answers what holds the job back, ending with its confidence."""
    if not job.findings:
        return (
            "Nothing stands out: no rank holds the others back and no pattern reached its "
            f"threshold; the median step takes {job.median_step_ms:.1f} ms "
            f"(bottleneck: {bottleneck_text(job)})."
        )
    top = job.findings[0]
    if top.id == STRAGGLER_FINDING and job.straggler is not None:
        return _straggler_sentence(job, job.straggler, top)
    cost = f" ({top.impact_pct:.0f}% of the step)" if top.impact_pct >= 1 else ""
    return f"{top.title.rstrip('.')}{cost}; confidence {top.confidence:.2f}."


def _bar(breakdown: Breakdown) -> str:
    """The mean step as one stacked bar, each part titled with its time and share."""
    total = breakdown.total_ms or 1.0
    parts = []
    for category, color in CATEGORY_COLORS.items():
        ms = getattr(breakdown, category)
        if ms <= 0:
            continue
        tip = f"{CATEGORY_LABELS[category]}: {ms:.1f} ms ({100 * ms / total:.0f}%)"
        parts.append(
            f'<span class="part" style="width:{100 * ms / total:.2f}%;background:{color}" '
            f'title="{escape(tip)}"></span>'
        )
    label = "the mean step, by category"
    return f'<div class="stepbar" role="img" aria-label="{label}">{"".join(parts)}</div>'


def _shares(breakdown: Breakdown) -> str:
    """Each category in words, largest first, with its swatch."""
    ordered = sorted(CATEGORY_COLORS, key=lambda c: -getattr(breakdown, c))
    items = [
        f'<li><span class="swatch" style="background:{CATEGORY_COLORS[c]}"></span>'
        f"{escape(CATEGORY_LABELS[c])} {getattr(breakdown, c):.1f} ms "
        f"({breakdown.percent(c):.0f}%)</li>"
        for c in ordered
        if getattr(breakdown, c) > 0
    ]
    hidden = breakdown.comm_overlapped_ms
    if hidden > 0:
        items.append(
            f'<li class="muted">and {hidden:.1f} ms of communication hidden under compute</li>'
        )
    return f'<ul class="shares">{"".join(items)}</ul>'


def step_overview(job: JobSummary) -> str:
    """The median step time and the mean step's breakdown, as a bar and in words."""
    ranks = f"{job.world_size} rank" + ("" if job.world_size == 1 else "s")
    head = (
        f'<p class="steptime"><strong>Step time {job.median_step_ms:.1f} ms</strong> '
        f'<span class="muted">(median over {ranks}; bottleneck: '
        f"{escape(bottleneck_text(job))})</span></p>"
    )
    if job.mean_breakdown.total_ms <= 0:
        reason = job.bottleneck_reason or "no step time was attributed to any category"
        return head + f'<p class="muted">No breakdown: {escape(reason)}.</p>'
    return head + _bar(job.mean_breakdown) + _shares(job.mean_breakdown)
