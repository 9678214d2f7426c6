"""The report's collective-bandwidth section: bus bandwidth against message size per group.

One inline SVG per (process group, collective), as the other plots (`plots`): message size
on a log2 axis, bus bandwidth on a linear one, the slowest rank's figure as filled points
and the fastest rank's as hollow ones, the link's peak and the finding's threshold
(`findings.collective_bandwidth`) as dashed lines. Below each, the table behind it. Group
names come from the traces and are escaped.
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.findings.collective_bandwidth import (
    BANDWIDTH_BOUND_BYTES,
    MAX_PEAK_FRACTION,
)
from stepscope.analysis.model.collective_bandwidth import size_label
from stepscope.analysis.model.group_bandwidth import GroupBandwidth
from stepscope.analysis.reports.context import ReportContext
from stepscope.analysis.reports.plots import FONT, LINE_COLORS, STRAGGLER_COLOR, nice_max

# The costliest groups get a chart each; the rest are in summary.json.
MAX_CHARTS = 8
LEFT, TOP, WIDTH, HEIGHT = 70, 20, 560, 220


def bandwidth_section(context: ReportContext) -> str | None:
    groups = context.job.collective_bandwidth
    if not groups:
        return None
    parts = [
        "<p>Bus bandwidth (NCCL's factors: all_reduce 2(n-1)/n, all_gather, reduce_scatter "
        "and all_to_all (n-1)/n, the others 1) per message-size bucket. Filled points: the "
        "slowest rank, whose kernels include waiting for late ranks; hollow points: the "
        f"fastest rank. Buckets of {size_label(BANDWIDTH_BOUND_BYTES)} and more below "
        f"{100 * MAX_PEAK_FRACTION:.0f}% of the peak are slow.</p>"
    ]
    for group in groups[:MAX_CHARTS]:
        parts.append(_group_block(group))
    if len(groups) > MAX_CHARTS:
        parts.append(f"<p>{len(groups) - MAX_CHARTS} more groups are in summary.json.</p>")
    return "".join(parts)


def _group_block(group: GroupBandwidth) -> str:
    timing = "GPU kernel time" if group.timing == "gpu_kernel" else "CPU op time (no kernel)"
    link = (
        f"{group.peak.link}, {group.peak.peak_gbps:g} GB/s each way ({group.peak.basis})"
        if group.peak
        else "link peak unknown (pass --link-peak)"
    )
    heading = f"{group.collective}, group {group.group} ({group.group_size} ranks)"
    where = f"{group.scope}-node ({group.scope_basis}); {link}; timed by {timing}."
    return (
        f"<h3>{escape(heading)}</h3><p>{escape(where)}</p>{bandwidth_chart(group)}{_table(group)}"
    )


def bandwidth_chart(group: GroupBandwidth) -> str:
    """Bus bandwidth against message size for one group's collective."""
    buckets = group.buckets
    low, high = buckets[0].bucket, buckets[-1].bucket
    peak = group.peak.peak_gbps if group.peak else 0.0
    measured = [b.busbw_best_gbps or 0.0 for b in buckets]
    y_max = nice_max(max([peak, *measured]))

    def x_of(bucket: int) -> float:
        return LEFT + (WIDTH * (bucket - low) / (high - low) if high > low else WIDTH / 2)

    def y_of(gbps: float) -> float:
        return TOP + HEIGHT - HEIGHT * gbps / y_max

    label = f"Bus bandwidth against message size, {group.collective} on group {group.group}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{LEFT + WIDTH + 150}" '
        f'height="{TOP + HEIGHT + 50}" role="img" aria-label="{escape(label)}">'
    ]
    for tick in range(6):
        value = y_max * tick / 5
        parts.append(
            f'<line x1="{LEFT}" y1="{y_of(value):.1f}" x2="{LEFT + WIDTH}" y2="{y_of(value):.1f}" '
            f'stroke="#ddd"/><text x="{LEFT - 6}" y="{y_of(value) + 4:.1f}" text-anchor="end" '
            f"{FONT}>{value:g}</text>"
        )
    for bucket in range(low, high + 1):
        parts.append(
            f'<text x="{x_of(bucket):.1f}" y="{TOP + HEIGHT + 16}" text-anchor="middle" {FONT}>'
            f"{escape(size_label(1 << bucket))}</text>"
        )
    parts.append(
        f'<text x="{LEFT + WIDTH / 2}" y="{TOP + HEIGHT + 36}" text-anchor="middle" {FONT}>'
        f'message size (bucket start)</text><text x="14" y="{TOP + HEIGHT / 2}" '
        f'transform="rotate(-90 14 {TOP + HEIGHT / 2})" text-anchor="middle" {FONT}>'
        "bus bandwidth (GB/s)</text>"
    )
    if group.peak:
        for gbps, name in ((peak, "peak"), (MAX_PEAK_FRACTION * peak, "slow below")):
            parts.append(
                f'<line x1="{LEFT}" y1="{y_of(gbps):.1f}" x2="{LEFT + WIDTH}" '
                f'y2="{y_of(gbps):.1f}" stroke="{STRAGGLER_COLOR}" stroke-dasharray="4 3"/>'
                f'<text x="{LEFT + WIDTH + 6}" y="{y_of(gbps) + 4:.1f}" {FONT}>'
                f"{name} {gbps:g} GB/s</text>"
            )
    for series, fill in (("busbw_gbps", LINE_COLORS[0]), ("busbw_best_gbps", "white")):
        points = [(b, getattr(b, series)) for b in buckets if getattr(b, series) is not None]
        coords = " ".join(f"{x_of(b.bucket):.1f},{y_of(v):.1f}" for b, v in points)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{LINE_COLORS[0]}"/>')
        for bucket, gbps in points:
            who = "fastest rank" if fill == "white" else f"slowest rank {bucket.slowest_rank}"
            tip = (
                f"{size_label(bucket.min_bytes)} and up: {gbps:.2f} GB/s ({who}), "
                f"{bucket.count} calls, {bucket.ms_per_step:.2f} ms per step"
            )
            parts.append(
                f'<circle cx="{x_of(bucket.bucket):.1f}" cy="{y_of(gbps):.1f}" r="4" '
                f'fill="{fill}" stroke="{LINE_COLORS[0]}"><title>{escape(tip)}</title></circle>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _table(group: GroupBandwidth) -> str:
    header = (
        "<tr><th>messages</th><th>calls</th><th>share of group</th><th>ms per step</th>"
        "<th>median call ms</th><th>bus GB/s (slowest rank)</th><th>bus GB/s (fastest)</th>"
        "<th>% of peak</th></tr>"
    )
    rows = []
    for b in group.buckets:
        cells = (
            f"{size_label(b.min_bytes)} to {size_label(b.min_bytes * 2)}",
            str(b.count),
            f"{100 * b.share_of_group:.0f}%",
            f"{b.ms_per_step:.3f}",
            f"{b.median_ms:.3f}",
            f"{b.busbw_gbps:.2f}" if b.busbw_gbps is not None else "-",
            f"{b.busbw_best_gbps:.2f}" if b.busbw_best_gbps is not None else "-",
            f"{b.pct_of_peak:.1f}" if b.pct_of_peak is not None else "-",
        )
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table>{header}{''.join(rows)}</table>"
