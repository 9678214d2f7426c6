"""Rank x step heatmaps for the report: every rank visible, in a bounded number of marks.

One row per rank (or per bin of adjacent ranks past `ROW_BUDGET`), one column per
captured step (or per bin of adjacent steps past `COLUMN_BUDGET`), each cell coloured by
one of `LEVELS` colours of a sequential scale shown with its legend and unit. A bin
shows its largest value (its slowest rank, its latest step), because a heatmap is read
for hot spots and an average would wash one out; the row's tooltip gives the bin's
minimum, median and maximum. The ranks the verdict names (`ReportContext.named`) always
keep a row of their own, outlined and labelled with why they are named.

Cells of one colour that touch in a row are drawn as one rectangle, and all of a row's
rectangles of one colour as one `<path>`, so the figure costs a few bytes per cell
whatever the rank count: at most about (ROW_BUDGET + MAX_NAMED_RANKS) x COLUMN_BUDGET
cells.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from html import escape

from stepscope.analysis.merging.trace_selection import FASTEST, MEDIAN, RANK_ZERO, STRAGGLER
from stepscope.analysis.reports.context import RankRow, ReportContext, rank_rows
from stepscope.analysis.reports.plots import FONT

ROW_BUDGET = 128
COLUMN_BUDGET = 64
LEVELS = 10
# A light-to-dark sequential scale (cream, amber, red, dark red), readable in print.
_ANCHORS = ((255, 247, 214), (253, 196, 110), (240, 110, 60), (190, 30, 40), (90, 0, 30))
NO_DATA = "#ffffff"
GRID_WIDTH = 640
LEFT = 96
MARKS_WIDTH = 340
ROW_LABEL_SPACING = 14

# Marker colours by why a rank is named, most telling first; one marker per row.
REASON_COLORS = (
    (STRAGGLER, "#d62728"),
    ("slow node", "#ff7f0e"),
    ("finding", "#9467bd"),
    (RANK_ZERO, "#1f77b4"),
    (FASTEST, "#2ca02c"),
    (MEDIAN, "#7f7f7f"),
)
OTHER_REASON_COLOR = "#8c564b"


def _palette(levels: int) -> list[str]:
    colours = []
    for index in range(levels):
        at = index / max(levels - 1, 1) * (len(_ANCHORS) - 1)
        low = min(int(at), len(_ANCHORS) - 2)
        part = at - low
        rgb = (
            round(a + (b - a) * part) for a, b in zip(_ANCHORS[low], _ANCHORS[low + 1], strict=True)
        )
        colours.append("#" + "".join(f"{c:02x}" for c in rgb))
    return colours


PALETTE = _palette(LEVELS)


def reason_color(reasons: Sequence[str]) -> str:
    for prefix, colour in REASON_COLORS:
        if any(reason.startswith(prefix) for reason in reasons):
            return colour
    return OTHER_REASON_COLOR


def mark_label(who: str, reasons: Sequence[str], limit: int = 48) -> str:
    """ "rank 700: straggler" for a mark, cut at `limit` characters (the tooltip and the
    detail table keep the whole text); "rank 0: rank 0" says it once."""
    shown = [r for r in reasons if not (r == RANK_ZERO and who == "rank 0")]
    text = f"{who}: {', '.join(shown)}" if shown else who
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _column_bins(steps: Sequence[int], budget: int) -> list[tuple[int, ...]]:
    width = -(-len(steps) // budget) if steps else 1
    return [tuple(steps[i : i + width]) for i in range(0, len(steps), width)]


def _cell(values: Mapping[int, Mapping[int, float]], row: RankRow, steps: tuple[int, ...]):
    """The largest value of the bin's ranks over the bin's steps, None when none has one."""
    found = [
        values[rank][step]
        for rank in row.ranks
        if rank in values
        for step in steps
        if step in values[rank]
    ]
    return max(found) if found else None


def _level(value: float, low: float, high: float) -> int:
    if high <= low:
        return 0
    return min(int((value - low) / (high - low) * LEVELS), LEVELS - 1)


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def heatmap(
    context: ReportContext, values: Mapping[int, Mapping[int, float]], what: str, unit: str
) -> str:
    """An SVG rank x step heatmap of `values` (rank -> step -> value in `unit`)."""
    ranks = sorted(s.rank for s in context.job.ranks)
    rows = rank_rows(ranks, context.named, ROW_BUDGET)
    columns = _column_bins(context.steps, COLUMN_BUDGET)
    grid = [[_cell(values, row, steps) for steps in columns] for row in rows]
    present = [v for line in grid for v in line if v is not None]
    if not present:
        return f'<p class="muted">No {escape(what)} per rank and step to show.</p>'
    low, high = min(present), max(present)
    few = len(rows) <= 32
    row_h = 14 if few else 4
    cell_w = GRID_WIDTH / len(columns)
    top = 56
    grid_h = row_h * len(rows)
    marks = _named_marks(rows, top, row_h)
    height = max(top + grid_h, marks[1]) + 48
    width = LEFT + GRID_WIDTH + MARKS_WIDTH
    label = f"{what} per rank and step, {unit}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot heatmap" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}">',
        _legend(LEFT, 6, low, high, f"{what} ({unit})"),
        f'<rect x="{LEFT}" y="{top}" width="{GRID_WIDTH}" height="{grid_h}" fill="{NO_DATA}" '
        'stroke="#999"/>',
    ]
    for index, (row, line) in enumerate(zip(rows, grid, strict=True)):
        parts.append(_row(index, row, line, top + index * row_h, row_h, cell_w, low, high, unit))
    parts.append(_rank_axis(rows, top, row_h, few))
    parts.append(_step_axis(columns, top + grid_h, cell_w))
    parts.append(marks[0])
    parts.append("</svg>")
    return "".join(parts)


def _row(index, row, line, y, row_h, cell_w, low, high, unit) -> str:
    runs: dict[int, list[str]] = {}
    column = 0
    while column < len(line):
        value = line[column]
        end = column + 1
        if value is not None:
            level = _level(value, low, high)
            while (
                end < len(line) and line[end] is not None and _level(line[end], low, high) == level
            ):
                end += 1
            w = (end - column) * cell_w
            runs.setdefault(level, []).append(
                f"M{LEFT + column * cell_w:.1f} {y}h{w:.1f}v{row_h}h-{w:.1f}z"
            )
        column = end
    shown = [v for v in line if v is not None]
    tip = row.label + (f" ({len(row.ranks)} ranks, each cell the largest)" if row.binned else "")
    if shown:
        tip += (
            f": min {_fmt(min(shown))}, median {_fmt(statistics.median(shown))}, "
            f"max {_fmt(max(shown))} {unit} over steps"
        )
    if row.reasons:
        tip += f"; named: {', '.join(row.reasons)}"
    paths = "".join(
        f'<path data-level="{level}" fill="{PALETTE[level]}" d="{"".join(d)}"/>'
        for level, d in sorted(runs.items())
    )
    return (
        f'<g class="row" data-row="{index}" data-first="{row.ranks[0]}" '
        f'data-last="{row.ranks[-1]}"><title>{escape(tip)}</title>{paths}</g>'
    )


def _legend(x: float, y: float, low: float, high: float, title: str) -> str:
    swatch = 36
    parts = [f'<text x="{x}" y="{y + 10}" {FONT}>{escape(title)}</text>']
    for level, colour in enumerate(PALETTE):
        sx = x + level * swatch
        parts.append(
            f'<rect class="legend-swatch" data-level="{level}" x="{sx}" y="{y + 16}" '
            f'width="{swatch}" height="10" fill="{colour}"/>'
        )
    if high <= low:
        # Every cell has the same value: one colour, and the legend says so.
        parts.append(
            f'<text x="{x}" y="{y + 38}" font-family="system-ui, sans-serif" font-size="10">'
            f"every cell {_fmt(low)}</text>"
        )
    for edge in range(0, LEVELS + 1, 2) if high > low else ():
        value = low + (high - low) * edge / LEVELS
        parts.append(
            f'<text x="{x + edge * swatch}" y="{y + 38}" text-anchor="middle" '
            f'font-family="system-ui, sans-serif" font-size="10">{_fmt(value)}</text>'
        )
    nx = x + LEVELS * swatch + 24
    parts.append(
        f'<rect x="{nx}" y="{y + 16}" width="14" height="10" fill="{NO_DATA}" stroke="#999"/>'
        f'<text x="{nx + 18}" y="{y + 25}" {FONT}>not captured</text>'
    )
    return "".join(parts)


def _rank_axis(rows: Sequence[RankRow], top: float, row_h: float, few: bool) -> str:
    """Row labels: every row when they fit, else one about every 40 px."""
    every = 1 if few else max(1, 40 // int(row_h))
    parts = []
    for index in range(0, len(rows), every):
        y = top + index * row_h + (row_h / 2 + 4 if few else 4)
        parts.append(
            f'<text x="{LEFT - 6}" y="{y:.1f}" text-anchor="end" '
            f'font-family="system-ui, sans-serif" font-size="10">{rows[index].label}</text>'
        )
    return "".join(parts)


def _step_axis(columns: Sequence[tuple[int, ...]], y: float, cell_w: float) -> str:
    every = max(1, int(48 // cell_w) + (48 % cell_w > 0))
    parts = []
    for index in range(0, len(columns), every):
        steps = columns[index]
        text = f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"
        x = LEFT + (index + 0.5) * cell_w
        parts.append(
            f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle" '
            f'font-family="system-ui, sans-serif" font-size="10">{text}</text>'
        )
    parts.append(
        f'<text x="{LEFT + GRID_WIDTH / 2}" y="{y + 32}" text-anchor="middle" {FONT}>'
        "global step</text>"
    )
    return "".join(parts)


def _named_marks(rows: Sequence[RankRow], top: float, row_h: float) -> tuple[str, float]:
    """Outline and label the named rows; adjacent rows named for the same reasons share
    one label. Labels are pushed down so they never overlap, with a leader line back to
    their rows. Returns the SVG and the lowest y the labels reach."""
    groups: list[tuple[int, int, tuple[str, ...]]] = []
    for index, row in enumerate(rows):
        if not row.reasons:
            continue
        if groups and groups[-1][1] == index - 1 and groups[-1][2] == row.reasons:
            groups[-1] = (groups[-1][0], index, row.reasons)
        else:
            groups.append((index, index, row.reasons))
    parts, next_free = [], top
    label_x = LEFT + GRID_WIDTH + 28
    for first, last, reasons in groups:
        colour = reason_color(reasons)
        y0, y1 = top + first * row_h, top + (last + 1) * row_h
        ranks = [rank for row in rows[first : last + 1] for rank in row.ranks]
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
        text_y = max((y0 + y1) / 2 + 4, next_free + 10)
        next_free = text_y + ROW_LABEL_SPACING - 10
        parts.append(
            f'<g class="named-row" data-ranks="{" ".join(map(str, ranks))}" '
            f'data-reasons="{escape("; ".join(reasons))}">'
            f"<title>{escape(who)}: {escape(', '.join(reasons))}</title>"
            f'<rect x="{LEFT - 2}" y="{y0 - 1}" width="{GRID_WIDTH + 4}" '
            f'height="{y1 - y0 + 2}" fill="none" stroke="{colour}" stroke-width="2"/>'
            f'<path d="M{LEFT + GRID_WIDTH + 4} {(y0 + y1) / 2:.1f}l8 -5v10z" fill="{colour}"/>'
            f'<line x1="{LEFT + GRID_WIDTH + 12}" y1="{(y0 + y1) / 2:.1f}" x2="{label_x - 2}" '
            f'y2="{text_y - 4:.1f}" stroke="{colour}"/>'
            f'<text class="row-label" x="{label_x}" y="{text_y:.1f}" fill="{colour}" {FONT}>'
            f"{escape(mark_label(who, reasons))}</text></g>"
        )
    return "".join(parts), next_free


def binning_note(context: ReportContext) -> str:
    """One sentence on how rows and columns were binned, for the figure's caption."""
    ranks = len(context.job.ranks)
    rows = rank_rows([s.rank for s in context.job.ranks], context.named, ROW_BUDGET)
    columns = _column_bins(context.steps, COLUMN_BUDGET)
    said = []
    if len(rows) < ranks:
        widest = max(len(row.ranks) for row in rows)
        said.append(
            f"{ranks} ranks are shown as {len(rows)} rows: adjacent ranks are binned (up to "
            f"{widest} per row) and each binned cell shows the bin's largest value; every "
            "named rank keeps a row of its own"
        )
    if len(columns) < len(context.steps):
        said.append(
            f"{len(context.steps)} steps are shown as {len(columns)} columns of adjacent "
            "steps, each the largest value"
        )
    return "; ".join(said) + "." if said else "One row per rank, one column per step."
