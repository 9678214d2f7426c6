"""The report's GPU section: NVML counters and memory against capacity, per rank.

Three column charts with one column per rank (SM utilisation; peak memory used and the
allocator's reserved peak against the device's size; power against its limit), then a
table. Columns narrow with the number of ranks, so a chart stays 900 px wide at 1024
ranks; the table lists every rank up to ``TABLE_MAX_RANKS`` and past that only the ranks
the outliers name (summary.json keeps every line). Marks carry ``<title>`` tooltips with
their numbers, like the other plots (``report_plots``).
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.model.counter_overview import CounterOverview, RankCounters
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.reports.plots import FONT

WIDTH, HEIGHT, LEFT, BOTTOM = 900, 160, 44, 22
TABLE_MAX_RANKS = 64
BAR, OUTLIER, CEILING = "#4c78a8", "#e45756", "#222"
GIB = 1024**3


def gpu_section(job: JobSummary) -> str:
    """The section's body, or "" when the job has neither counters nor memory peaks."""
    memory = {s.rank: s.memory for s in job.ranks if s.memory.capacity_bytes}
    counters = job.counters
    if counters is None and not memory:
        return ""
    parts = []
    if counters is not None:
        odd = {o.rank for o in counters.outliers}
        parts.append(_summary_line(counters))
        parts.append(
            _columns(
                "mean SM utilisation, %",
                [(line.rank, line.sm_util_pct, 100.0) for line in counters.ranks],
                odd,
            )
        )
        parts.append(
            _columns(
                "peak memory used (NVML), % of the device",
                [(line.rank, line.mem_used_pct, 100.0) for line in counters.ranks],
                odd,
            )
        )
        parts.append(
            _columns(
                "mean power, % of the enforced limit",
                [
                    (line.rank, _share(line.power_w, line.power_limit_w), 100.0)
                    for line in counters.ranks
                ],
                odd,
            )
        )
        parts.append(_table(counters))
    if memory:
        parts.append(
            _columns(
                "allocator reserved peak ([memory] events), % of totalGlobalMem",
                [
                    (rank, m.peak_reserved_pct_of_capacity, 100.0)
                    for rank, m in sorted(memory.items())
                ],
                set(),
            )
        )
    return "".join(parts)


def _summary_line(counters: CounterOverview) -> str:
    facts = [f"{len(counters.ranks)} rank(s) sampled"]
    if counters.sm_util_pct is not None:
        facts.append(f"mean SM utilisation {counters.sm_util_pct:.0f}%")
    if counters.mem_used_peak_pct is not None:
        facts.append(
            f"peak memory {counters.mem_used_peak_mib / 1024:.1f} of "
            f"{counters.mem_total_mib / 1024:.1f} GiB on rank {counters.mem_peak_rank}"
        )
    if counters.power_w is not None:
        facts.append(f"mean power {counters.power_w:.0f} W")
    odd = [
        f"rank {o.rank} {o.metric} {o.value:g} (others {o.typical:g})" for o in counters.outliers
    ]
    if odd:
        facts.append("outliers: " + "; ".join(odd))
    return f"<p>{escape(', '.join(facts))}.</p>"


def _share(part: float | None, whole: float | None) -> float | None:
    return 100.0 * part / whole if part is not None and whole else None


def _columns(title: str, values: list[tuple[int, float | None, float]], odd: set[int]) -> str:
    """One column per rank, height value/top of the plot; outlier ranks in red."""
    present = [(rank, value, top) for rank, value, top in values if value is not None]
    if not present:
        return ""
    span = (WIDTH - LEFT - 8) / len(present)
    width = max(1.0, span * 0.8)
    marks = []
    for index, (rank, value, top) in enumerate(present):
        height = (HEIGHT - BOTTOM - 16) * min(1.0, max(0.0, value / top))
        x = LEFT + index * span
        y = HEIGHT - BOTTOM - height
        color = OUTLIER if rank in odd else BAR
        marks.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" '
            f'fill="{color}"><title>rank {rank}: {value:.1f}</title></rect>'
        )
    axis = HEIGHT - BOTTOM
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img">'
        f'<text x="{LEFT}" y="12" {FONT}>{escape(title)}</text>'
        f'<line x1="{LEFT}" y1="16" x2="{WIDTH - 8}" y2="16" stroke="{CEILING}" '
        f'stroke-dasharray="3,3"><title>100%</title></line>'
        f'<line x1="{LEFT}" y1="{axis}" x2="{WIDTH - 8}" y2="{axis}" stroke="#999"/>'
        f'<text x="4" y="20" {FONT}>100</text><text x="4" y="{axis}" {FONT}>0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 6}" {FONT}>ranks {present[0][0]} to {present[-1][0]}</text>'
        + "".join(marks)
        + "</svg>"
    )


def _table(counters: CounterOverview) -> str:
    lines = counters.ranks
    shown = lines
    note = ""
    if len(lines) > TABLE_MAX_RANKS:
        named = {o.rank for o in counters.outliers}
        shown = [line for line in lines if line.rank in named]
        note = (
            f'<p class="muted">{len(lines)} ranks: the table shows the outliers; '
            "summary.json holds every rank's line.</p>"
        )
    header = (
        "<tr><th>rank</th><th>SM util %</th><th>SM clock / max</th><th>throttled</th>"
        "<th>memory used GiB</th><th>of GiB</th><th>power W</th><th>limit W</th></tr>"
    )
    rows = "".join(_row(line) for line in shown)
    return f"<table>{header}{rows}</table>{note}"


def _row(line: RankCounters) -> str:
    def number(value: float | None, form: str) -> str:
        return format(value, form) if value is not None else ""

    throttled = ""
    if line.throttled_fraction is not None:
        throttled = f"{line.throttled_fraction:.0%} {' '.join(line.throttle_reasons)}".strip()
    cells = [
        str(line.rank),
        number(line.sm_util_pct, ".1f"),
        number(line.sm_clock_ratio, ".2f"),
        throttled,
        number(
            line.mem_used_peak_mib / 1024 if line.mem_used_peak_mib is not None else None, ".1f"
        ),
        number(line.mem_total_mib / 1024 if line.mem_total_mib is not None else None, ".1f"),
        number(line.power_w, ".0f"),
        number(line.power_limit_w, ".0f"),
    ]
    return "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
