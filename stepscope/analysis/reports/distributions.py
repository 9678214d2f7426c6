"""Distributions across ranks for the report, in place of one bar or line per rank.

Past `SMALL_JOB_RANKS` ranks, per-rank bars are a wall of near-identical stripes; what
a reader needs is the shape of the spread and where the named ranks sit in it. Each
quantity (a rank's typical step time, its median arrival lag at collectives, its share
of the step per breakdown category) is shown as quantiles over ranks, step time and lag
also as a histogram of a fixed number of bins with the named ranks marked on it. Every
figure costs the same whatever the rank count.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from html import escape

from stepscope.analysis.reports.context import ReportContext
from stepscope.analysis.reports.heatmaps import mark_label, reason_color
from stepscope.analysis.reports.plots import CATEGORY_COLORS, CATEGORY_LABELS, FONT, nice_max
from stepscope.rank_ranges import rank_ranges

HISTOGRAM_BINS = 32
QUANTILES = (("min", 0.0), ("p5", 0.05), ("p25", 0.25), ("median", 0.5), ("p75", 0.75),
             ("p95", 0.95), ("max", 1.0))  # fmt: skip
LEFT, WIDTH = 60, 640
MARK_LANES = 3


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of ascending `ordered`, interpolating linearly between neighbours."""
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _named_groups(
    context: ReportContext, values: Mapping[int, float]
) -> list[tuple[str, list[int]]]:
    """The named ranks with a value, grouped by their first reason (a slow node's ranks
    share one mark label)."""
    groups: dict[str, list[int]] = {}
    for rank, reasons in context.named.items():
        if rank in values:
            groups.setdefault(reasons[0], []).append(rank)
    return list(groups.items())


def histogram(context: ReportContext, values: Mapping[int, float], what: str, unit: str) -> str:
    """Ranks per bin of `values` (rank -> value in `unit`), the named ranks marked."""
    ordered = sorted(values.values())
    low, high = ordered[0], ordered[-1]
    span = high - low or max(abs(high), 1.0) * 0.01
    width_of_bin = span / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for value in ordered:
        counts[min(int((value - low) / width_of_bin), HISTOGRAM_BINS - 1)] += 1
    top, plot_h = 20 + 14 * MARK_LANES, 160
    y_max = nice_max(max(counts))
    height = top + plot_h + 56
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot histogram" '
        f'width="{LEFT + WIDTH + 40}" '
        f'height="{height}" role="img" aria-label="{escape(what)}: ranks per bin">'
    ]
    bar_w = WIDTH / HISTOGRAM_BINS
    for index, count in enumerate(counts):
        if not count:
            continue
        # A bin of one rank still shows: a lone straggler is what the reader looks for.
        h = max(plot_h * count / y_max, 2.0)
        lo = low + index * width_of_bin
        tip = f"{count} rank(s) with {what} {lo:.3g}-{lo + width_of_bin:.3g} {unit}"
        parts.append(
            f'<rect class="bin" data-count="{count}" x="{LEFT + index * bar_w:.1f}" '
            f'y="{top + plot_h - h:.1f}" width="{bar_w - 1:.1f}" height="{h:.1f}" fill="#4c78a8">'
            f"<title>{escape(tip)}</title></rect>"
        )
    for tick in range(5):
        y = top + plot_h - plot_h * tick / 4
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>'
            f"{y_max * tick / 4:g}</text>"
        )
    axis_y = top + plot_h
    parts.append(
        f'<line x1="{LEFT}" y1="{axis_y}" x2="{LEFT + WIDTH}" y2="{axis_y}" stroke="#555"/>'
    )
    for tick in range(5):
        x = LEFT + WIDTH * tick / 4
        parts.append(
            f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle" {FONT}>'
            f"{low + span * tick / 4:.3g}</text>"
        )
    parts.append(
        f'<text x="{LEFT + WIDTH / 2}" y="{axis_y + 34}" text-anchor="middle" {FONT}>'
        f"{escape(what)} ({escape(unit)}); bars count ranks</text>"
    )

    def x_of(value: float) -> float:
        return LEFT + WIDTH * (value - low) / span

    for lane, (reason, ranks) in enumerate(
        sorted(_named_groups(context, values), key=lambda g: values[g[1][0]])
    ):
        colour = reason_color([reason])
        label_y = 14 + 14 * (lane % MARK_LANES)
        mark_x = x_of(statistics.median(values[r] for r in ranks))
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"
        shown = ", ".join(f"{values[r]:.3g}" for r in ranks[:4]) + (
            ", ..." if len(ranks) > 4 else ""
        )
        anchor = "end" if mark_x > LEFT + WIDTH * 0.7 else "start"
        parts.append(
            f'<g class="named-mark" data-ranks="{" ".join(map(str, ranks))}" '
            f'data-reason="{escape(reason)}">'
            + "".join(
                f'<line x1="{x_of(values[r]):.1f}" y1="{label_y + 2}" x2="{x_of(values[r]):.1f}" '
                f'y2="{axis_y}" stroke="{colour}" stroke-dasharray="3 2"/>'
                for r in ranks
            )
            + f'<text x="{mark_x:.1f}" y="{label_y}" text-anchor="{anchor}" fill="{colour}" {FONT}>'
            f"{escape(mark_label(who, [reason]))}: {shown} {escape(unit)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def breakdown_boxes(context: ReportContext) -> str:
    """Per category, the spread over ranks of its share of the step: box p25-p75,
    whiskers p5-p95, median line, min and max dots."""
    shares = {
        category: sorted(b.percent(category) for b in context.job.rank_breakdowns.values())
        for category in CATEGORY_LABELS
    }
    row_h, top, label_w = 26, 10, 160
    height = top + row_h * len(shares) + 46
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot boxes" '
        f'width="{label_w + WIDTH + 40}" '
        f'height="{height}" role="img" aria-label="Share of the step per category across ranks">'
    ]

    def x_of(percent: float) -> float:
        return label_w + WIDTH * percent / 100

    for index, (category, values) in enumerate(shares.items()):
        if not values:
            continue
        y = top + index * row_h
        q = {name: quantile(values, at) for name, at in QUANTILES}
        colour = CATEGORY_COLORS[category]
        tip = f"{CATEGORY_LABELS[category]} % of step over {len(values)} ranks: " + ", ".join(
            f"{name} {value:.1f}" for name, value in q.items()
        )
        mid = y + row_h / 2
        parts.append(
            f'<g class="box" data-category="{category}"><title>{escape(tip)}</title>'
            f'<text x="{label_w - 8}" y="{mid + 4}" text-anchor="end" {FONT}>'
            f"{CATEGORY_LABELS[category]}</text>"
            f'<line x1="{x_of(q["p5"]):.1f}" y1="{mid}" x2="{x_of(q["p95"]):.1f}" y2="{mid}" '
            f'stroke="{colour}"/>'
            f'<rect x="{x_of(q["p25"]):.1f}" y="{y + 5}" '
            f'width="{max(x_of(q["p75"]) - x_of(q["p25"]), 1):.1f}" height="{row_h - 10}" '
            f'fill="{colour}" fill-opacity="0.5" stroke="{colour}"/>'
            f'<line x1="{x_of(q["median"]):.1f}" y1="{y + 3}" x2="{x_of(q["median"]):.1f}" '
            f'y2="{y + row_h - 3}" stroke="#222" stroke-width="2"/>'
            f'<circle cx="{x_of(q["min"]):.1f}" cy="{mid}" r="2.5" fill="{colour}"/>'
            f'<circle cx="{x_of(q["max"]):.1f}" cy="{mid}" r="2.5" fill="{colour}"/></g>'
        )
    axis_y = top + row_h * len(shares) + 4
    parts.append(
        f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + WIDTH}" y2="{axis_y}" stroke="#555"/>'
    )
    for tick in range(0, 101, 20):
        parts.append(
            f'<text x="{x_of(tick):.1f}" y="{axis_y + 16}" text-anchor="middle" {FONT}>'
            f"{tick}</text>"
        )
    parts.append(
        f'<text x="{label_w + WIDTH / 2}" y="{axis_y + 34}" text-anchor="middle" {FONT}>'
        "% of the rank's average step (box p25-p75, whiskers p5-p95, dots min and max)</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def quantile_table(context: ReportContext) -> str:
    """Quantiles over ranks of every per-rank quantity the figures show."""
    job = context.job
    rows: list[tuple[str, list[float]]] = [
        ("step time (ms)", sorted(context.rank_step_ms.values())),
        ("arrival lag at collectives (ms)", sorted(a.median_lag_ms for a in job.arrivals)),
    ]
    rows += [
        (f"{label} (% of step)", sorted(b.percent(c) for b in job.rank_breakdowns.values()))
        for c, label in CATEGORY_LABELS.items()
    ]
    header = (
        "<tr><th>per rank</th><th>ranks</th>"
        + "".join(f"<th>{name}</th>" for name, _ in QUANTILES)
        + "</tr>"
    )
    body = []
    for name, values in rows:
        if not values:
            continue
        cells = "".join(f"<td>{quantile(values, at):.2f}</td>" for _, at in QUANTILES)
        body.append(f"<tr><td>{escape(name)}</td><td>{len(values)}</td>{cells}</tr>")
    return f'<table class="quantiles">{header}{"".join(body)}</table>'


def distributions(context: ReportContext) -> str | None:
    """The distributions section; None for a small job, whose per-rank bars still read."""
    if context.small:
        return None
    job = context.job
    parts = [
        f'<p class="muted">{len(job.ranks)} ranks: quantiles and histograms over ranks take the '
        "place of one bar or line per rank; the ranks the verdict names are marked.</p>",
        quantile_table(context),
    ]
    if context.rank_step_ms:
        parts.append("<h3>Step time per rank (median over its captured steps)</h3>")
        parts.append(histogram(context, context.rank_step_ms, "step time", "ms"))
    lags = {a.rank: a.median_lag_ms for a in job.arrivals}
    if lags:
        parts.append("<h3>Arrival lag at collectives per rank (median over steps)</h3>")
        parts.append(histogram(context, lags, "arrival lag", "ms"))
    if job.rank_breakdowns:
        parts.append("<h3>Share of the step per category, across ranks</h3>")
        parts.append(breakdown_boxes(context))
    return "".join(parts)
