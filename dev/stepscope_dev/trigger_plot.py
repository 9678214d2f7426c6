"""The step time a run's agents served on ``/metrics``, as series and as an SVG plot.

A recording keeps what each scrape read of every rank's step-duration histogram: its ``_sum``
(seconds) and ``_count`` (steps). A rank's step time between two scrapes is the difference of
the sums over the difference of the counts, which is what the chart's Grafana dashboard draws
in its panel "Slowest ranks (mean step time)": ``rate(..._sum[w]) / rate(..._count[w])`` per
rank, here with ``w`` one scrape interval. The trigger's own sample is different (the median
over ranks of each rank's last 20 steps, read through the agents' signed status), so the plot
shows the series a user's dashboard shows, with the band the trigger's Event stated drawn over
it.

The SVG is drawn with the HTML report's plot conventions (``stepscope.analysis.reports.plots``):
no script, a ``<title>`` on every mark with its exact number.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from stepscope.analysis.reports.plots import FONT, LINE_COLORS, STRAGGLER_COLOR, nice_max

BAND_COLOR = STRAGGLER_COLOR
MEDIAN_COLOR = "#888"
MARK_COLOR = "#555"
WINDOW_COLOR = "#eeeeee"


@dataclass(frozen=True)
class Scrape:
    """One rank's step-duration histogram as one scrape of its agent read it."""

    time: float  # unix seconds
    pod: str
    rank: int
    seconds_total: float  # the histogram's _sum
    steps: float  # the histogram's _count


@dataclass(frozen=True)
class Point:
    time: float
    step_ms: float


def rank_series(scrapes: Sequence[Scrape]) -> dict[int, list[Point]]:
    """Each rank's mean step time between consecutive scrapes of it, milliseconds, at the later
    scrape's time; an interval without a step has none."""
    by_rank: dict[int, list[Scrape]] = {}
    for scrape in sorted(scrapes, key=lambda s: s.time):
        by_rank.setdefault(scrape.rank, []).append(scrape)
    series: dict[int, list[Point]] = {}
    for rank, rows in sorted(by_rank.items()):
        points = []
        for before, after in zip(rows, rows[1:], strict=False):
            steps = after.steps - before.steps
            if steps > 0:
                ms = 1000 * (after.seconds_total - before.seconds_total) / steps
                points.append(Point(after.time, ms))
        series[rank] = points
    return series


def job_series(series: dict[int, list[Point]], interval_s: float) -> list[Point]:
    """The median over ranks of each scrape round (the points less than half an interval
    after the round's first), at the round's first time."""
    points = sorted((p for ps in series.values() for p in ps), key=lambda p: p.time)
    rounds: list[list[Point]] = []
    for point in points:
        if rounds and point.time - rounds[-1][0].time < interval_s / 2:
            rounds[-1].append(point)
        else:
            rounds.append([point])
    return [Point(r[0].time, statistics.median(p.step_ms for p in r)) for r in rounds]


@dataclass(frozen=True)
class Marks:
    """What the plot marks besides the series: when the compute was added, when the trigger
    fired, and the band its Event stated (milliseconds)."""

    knob_at: float
    knob_label: str
    fired_at: float
    fired_label: str
    band_median_ms: float
    band_upper_ms: float
    # The steps the opened session captured, from its first step's start to its last's end.
    window: tuple[float, float]
    window_label: str


def step_time_svg(series: dict[int, list[Point]], marks: Marks) -> str:
    """One line per rank over the run's seconds, the band's median and edge, and the two
    moments as vertical lines."""
    left, top, width, height, right = 60, 30, 620, 260, 200
    start = min(p.time for ps in series.values() for p in ps)
    end = max(p.time for ps in series.values() for p in ps)
    x_max = nice_max(end - start)
    highest = max(p.step_ms for ps in series.values() for p in ps)
    y_max = nice_max(max(highest, marks.band_upper_ms))

    def x_of(moment: float) -> float:
        return left + width * (moment - start) / x_max

    def y_of(ms: float) -> float:
        return top + height - height * ms / y_max

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + right}" '
        f'height="{top + height + 50}" role="img" '
        'aria-label="Step time per rank, scraped from the agents">',
        f'<rect width="{left + width + right}" height="{top + height + 50}" fill="#fff"/>',
    ]
    first, last = (x_of(moment) for moment in marks.window)
    parts.append(
        f'<rect x="{first:.1f}" y="{top}" width="{last - first:.1f}" height="{height}" '
        f'fill="{WINDOW_COLOR}"><title>{escape(marks.window_label)}</title></rect>'
    )
    for tick in range(6):
        value = y_max * tick / 5
        y = y_of(value)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{value:g}</text>'
        )
        seconds = x_max * tick / 5
        x = x_of(start + seconds)
        parts.append(
            f'<text x="{x:.1f}" y="{top + height + 16}" text-anchor="middle" {FONT}>'
            f"{seconds:g}</text>"
        )
    parts.append(
        f'<text x="{left + width / 2}" y="{top + height + 34}" text-anchor="middle" {FONT}>'
        "seconds since the first scrape</text>"
        f'<text x="14" y="{top + height / 2}" transform="rotate(-90 14 {top + height / 2})" '
        f'text-anchor="middle" {FONT}>step time (ms)</text>'
    )
    for ms, color, label in (
        (marks.band_median_ms, MEDIAN_COLOR, f"band median {marks.band_median_ms:g} ms"),
        (marks.band_upper_ms, BAND_COLOR, f"band edge {marks.band_upper_ms:g} ms"),
    ):
        y = y_of(ms)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" stroke="{color}" '
            f'stroke-dasharray="6 4"><title>{escape(label)}</title></line>'
        )
    # The change's label ends at its line, the firing's starts at its own: they are seconds
    # apart, so the two never overlap.
    for moment, label, anchor, shift in (
        (marks.knob_at, marks.knob_label, "end", -4),
        (marks.fired_at, marks.fired_label, "start", 4),
    ):
        x = x_of(moment)
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + height}" stroke="{MARK_COLOR}"'
            f' stroke-dasharray="2 3"><title>{escape(label)}</title></line>'
            f'<text x="{x + shift:.1f}" y="{top - 6}" text-anchor="{anchor}" {FONT}>'
            f"{escape(label)}</text>"
        )
    for index, (rank, points) in enumerate(sorted(series.items())):
        color = LINE_COLORS[index % len(LINE_COLORS)]
        coords = " ".join(f"{x_of(p.time):.1f},{y_of(p.step_ms):.1f}" for p in points)
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.5">'
            f"<title>rank {rank}</title></polyline>"
        )
    legend = [(LINE_COLORS[i % len(LINE_COLORS)], "", f"rank {r}") for i, r in enumerate(series)]
    legend += [
        (MEDIAN_COLOR, "6 4", "band median (Event)"),
        (BAND_COLOR, "6 4", "band edge (Event)"),
    ]
    for index, (color, dashes, label) in enumerate(legend):
        y = top + 10 + 18 * index
        dash = f' stroke-dasharray="{dashes}"' if dashes else ""
        parts.append(
            f'<line x1="{left + width + 12}" y1="{y}" x2="{left + width + 32}" y2="{y}" '
            f'stroke="{color}" stroke-width="1.5"{dash}/>'
            f'<text x="{left + width + 38}" y="{y + 4}" {FONT}>{escape(label)}</text>'
        )
    y = top + 10 + 18 * len(legend)
    parts.append(
        f'<rect x="{left + width + 12}" y="{y - 6}" width="20" height="12" fill="{WINDOW_COLOR}"/>'
        f'<text x="{left + width + 38}" y="{y + 4}" {FONT}>{escape(marks.window_label)}</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
