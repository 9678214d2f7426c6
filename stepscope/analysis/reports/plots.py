"""Inline SVG plots for the HTML report: no JavaScript, no external assets.

Each function returns one `<svg>` element as a string, sized by its data, with
`<title>` tooltips carrying the exact numbers behind every mark.
"""

from __future__ import annotations

import math
from html import escape

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import Breakdown

CATEGORY_COLORS = {
    "compute_ms": "#4c78a8",
    "comm_exposed_ms": "#e45756",
    "data_loading_ms": "#f58518",
    "host_overhead_ms": "#72b7b2",
    "idle_ms": "#bab0ac",
}
CATEGORY_LABELS = {
    "compute_ms": "compute",
    "comm_exposed_ms": "exposed communication",
    "data_loading_ms": "data loading",
    "host_overhead_ms": "host overhead",
    "idle_ms": "idle",
}
LINE_COLORS = ("#4c78a8", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#eeca3b", "#ff9da6")
STRAGGLER_COLOR = "#e45756"
# With more ranks a per-rank legend is noise; the tooltips still name each line.
LEGEND_MAX_RANKS = 16
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def nice_max(value: float) -> float:
    """A round axis maximum at or above `value` whose fifths are round too."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    return next(
        magnitude * f for f in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if magnitude * f >= value
    )


def _legend(x: float, y: float) -> str:
    items, offset = [], 0.0
    for category, color in CATEGORY_COLORS.items():
        label = CATEGORY_LABELS[category]
        items.append(
            f'<rect x="{x + offset:.1f}" y="{y}" width="12" height="12" fill="{color}"/>'
            f'<text x="{x + offset + 16:.1f}" y="{y + 10}" {FONT}>{label}</text>'
        )
        offset += 28 + 7 * len(label)
    return "".join(items)


def breakdown_per_rank(job: JobSummary) -> str:
    """Stacked horizontal bars: each rank's average step split into the five categories."""
    rows: list[tuple[int, Breakdown]] = sorted(job.rank_breakdowns.items())
    bar, gap, left, width = 18, 6, 70, 640
    scale_max = nice_max(max((b.total_ms for _, b in rows), default=1.0))
    height = 40 + len(rows) * (bar + gap) + 40
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{left + width + 30}" '
            f'height="{height}" role="img" aria-label="Step time breakdown per rank">'
        )
    ]
    parts.append(_legend(left, 8))
    straggler = job.straggler.rank if job.straggler else None
    for index, (rank, breakdown) in enumerate(rows):
        y = 32 + index * (bar + gap)
        label = f"rank {rank}" + (" ⚑" if rank == straggler else "")
        parts.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end" {FONT}>{label}</text>')
        x = float(left)
        for category, color in CATEGORY_COLORS.items():
            value = getattr(breakdown, category)
            span = width * value / scale_max
            if span <= 0:
                continue
            share = breakdown.percent(category)
            tip = f"rank {rank} {CATEGORY_LABELS[category]}: {value:.2f} ms ({share:.1f}%)"
            parts.append(
                f'<rect x="{x:.2f}" y="{y}" width="{span:.2f}" height="{bar}" fill="{color}">'
                f"<title>{escape(tip)}</title></rect>"
            )
            x += span
    axis_y = 32 + len(rows) * (bar + gap) + 4
    parts.append(_x_axis(left, width, axis_y, scale_max, "ms per step (average over common steps)"))
    parts.append("</svg>")
    return "".join(parts)


def _x_axis(left: float, width: float, y: float, scale_max: float, label: str) -> str:
    parts = [f'<line x1="{left}" y1="{y}" x2="{left + width}" y2="{y}" stroke="#555"/>']
    for tick in range(6):
        x = left + width * tick / 5
        parts.append(
            f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#555"/>'
            f'<text x="{x:.1f}" y="{y + 16}" text-anchor="middle" {FONT}>'
            f"{scale_max * tick / 5:g}</text>"
        )
    parts.append(
        f'<text x="{left + width / 2}" y="{y + 32}" text-anchor="middle" {FONT}>{label}</text>'
    )
    return "".join(parts)


def step_times(job: JobSummary) -> str:
    """One line per rank: the duration of each captured step."""
    series = {
        s.rank: sorted((r.step, r.duration_ms) for r in s.steps if r.step >= 0) for s in job.ranks
    }
    steps = sorted({step for points in series.values() for step, _ in points})
    left, top, width, height = 60, 30, 640, 260
    total_height = top + height + 50
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{left + width + 120}" '
            f'height="{total_height}" role="img" aria-label="Step time per rank per step">'
        )
    ]
    if not steps:
        parts.append(f'<text x="{left}" y="{top + 20}" {FONT}>No ProfilerStep annotations.</text>')
        return "".join(parts) + "</svg>"
    y_max = nice_max(max(ms for points in series.values() for _, ms in points))
    position = {step: i for i, step in enumerate(steps)}

    def x_of(step: int) -> float:
        return left + (width * position[step] / (len(steps) - 1) if len(steps) > 1 else width / 2)

    def y_of(ms: float) -> float:
        return top + height - height * ms / y_max

    for tick in range(6):
        value = y_max * tick / 5
        y = y_of(value)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{value:g}</text>'
        )
    for step in steps:
        parts.append(
            f'<text x="{x_of(step):.1f}" y="{top + height + 16}" text-anchor="middle" {FONT}>'
            f"{step}</text>"
        )
    parts.append(
        f'<text x="{left + width / 2}" y="{top + height + 34}" text-anchor="middle" {FONT}>'
        "step</text>"
        f'<text x="14" y="{top + height / 2}" transform="rotate(-90 14 {top + height / 2})" '
        f'text-anchor="middle" {FONT}>step time (ms)</text>'
    )
    straggler = job.straggler.rank if job.straggler else None
    for index, (rank, points) in enumerate(sorted(series.items())):
        color = STRAGGLER_COLOR if rank == straggler else LINE_COLORS[index % len(LINE_COLORS)]
        stroke = 3 if rank == straggler else 1.5
        coords = " ".join(f"{x_of(step):.1f},{y_of(ms):.1f}" for step, ms in points)
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="{stroke}">'
            f"<title>rank {rank}</title></polyline>"
        )
        for step, ms in points:
            parts.append(
                f'<circle cx="{x_of(step):.1f}" cy="{y_of(ms):.1f}" r="3" fill="{color}">'
                f"<title>rank {rank}, step {step}: {ms:.2f} ms</title></circle>"
            )
        if len(series) <= LEGEND_MAX_RANKS:
            y = top + 10 + 16 * index
            parts.append(
                f'<line x1="{left + width + 12}" y1="{y}" x2="{left + width + 32}" y2="{y}" '
                f'stroke="{color}" stroke-width="{stroke}"/>'
                f'<text x="{left + width + 38}" y="{y + 4}" {FONT}>rank {rank}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
