"""The report's efficiency section: MFU per rank, skipped steps, and how the GPU work was
launched (CUDA graphs, driver launches, syncs).

One table row per rank, up to ``TABLE_MAX_RANKS`` (the lowest MFU first past that;
summary.json keeps every row). An unknown MFU shows its reason once, not per rank, when
every rank shares it. Every string from the trace is escaped.
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.launch_kinds import SYNC_KINDS

TABLE_MAX_RANKS = 64


def efficiency_section(job: JobSummary) -> str | None:
    """The section's body, or None when no rank measured MFU, skips or launch kinds."""
    parts = [_mfu(job), _skips(job), _launch_kinds(job)]
    parts = [part for part in parts if part]
    return "".join(parts) or None


def _mfu(job: JobSummary) -> str:
    overview = job.efficiency
    if overview is None or not overview.utilization:
        return ""
    rows = overview.utilization
    if overview.median_mfu_pct is None:
        reasons = sorted({row.unknown_reason or "unknown" for row in rows})
        return "<p>MFU unknown: " + "; ".join(escape(r) for r in reasons[:4]) + ".</p>"
    shown = sorted(rows, key=lambda r: (r.median_mfu_pct is None, r.median_mfu_pct or 0.0))
    shown = sorted(shown[:TABLE_MAX_RANKS], key=lambda r: r.rank)
    body = "".join(
        f"<tr><td>{row.rank}</td><td>{_pct(row.median_mfu_pct)}</td>"
        f"<td>{escape(row.device or '')}</td><td>{escape(row.source or '')}</td>"
        f"<td>{escape(row.unknown_reason or '')}</td></tr>"
        for row in shown
    )
    left = len(rows) - len(shown)
    more = f"<p>{left} more ranks in summary.json.</p>" if left > 0 else ""
    return (
        f"<p>Model FLOPs utilisation: <b>{overview.median_mfu_pct:.1f}%</b> of the dense "
        "peak (median over ranks of each rank's median step).</p>"
        "<table><tr><th>rank</th><th>MFU</th><th>peak of</th><th>FLOPs from</th>"
        f"<th>note</th></tr>{body}</table>{more}"
    )


def _skips(job: JobSummary) -> str:
    overview = job.efficiency
    if overview is None or not overview.skipped_steps:
        return ""
    rows = sorted(overview.skipped_steps, key=lambda r: (-r.skipped_count, r.rank))
    body = "".join(
        f"<tr><td>{row.rank}</td><td>{row.skipped_count}</td><td>{row.scaler_steps}</td></tr>"
        for row in rows[:TABLE_MAX_RANKS]
    )
    return (
        "<p>Gradient scaler: optimizer steps skipped (inf/NaN gradients).</p>"
        f"<table><tr><th>rank</th><th>skipped</th><th>scaled steps</th></tr>{body}</table>"
    )


def _launch_kinds(job: JobSummary) -> str:
    ranks = [(s.rank, s.launch_kinds) for s in job.ranks if s.launch_kinds is not None]
    if not ranks:
        return ""
    body = "".join(
        f"<tr><td>{rank}</td><td>{kinds.graph_launches}</td><td>{kinds.graph_kernels}</td>"
        f"<td>{kinds.graph_launches_without_kernels}</td><td>{kinds.driver_launches}</td>"
        + "".join(f"<td>{kinds.sync_calls.get(kind, 0)}</td>" for kind in SYNC_KINDS)
        + "</tr>"
        for rank, kinds in ranks[:TABLE_MAX_RANKS]
    )
    syncs = "".join(f"<th>{kind.replace('_', ' ')}</th>" for kind in SYNC_KINDS)
    return (
        "<p>Launches and waits beyond cudaLaunchKernel.</p><table><tr><th>rank</th>"
        "<th>graph launches</th><th>graph kernels</th><th>graphs without kernels</th>"
        f"<th>driver launches</th>{syncs}</tr>{body}</table>"
    )


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}%"
