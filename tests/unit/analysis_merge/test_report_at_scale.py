"""The HTML report reads at 1024 ranks and still at 4, on jobs built by the real merge.

Every figure is parsed (each `<svg>` as XML, the tables with the standard HTML parser),
so a test fails when a mark, a row or a bound goes missing, not only when a string does.
"""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from synthetic_ranks import STEP_US, rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.merging.trace_selection import ROOM_IN_BUDGET, STRAGGLER
from stepscope.analysis.model.job_summary import Evidence, Finding, Severity
from stepscope.analysis.reports.context import (
    MAX_NAMED_RANKS,
    MERGED_REASON,
    ReportContext,
    rank_rows,
)
from stepscope.analysis.reports.heatmaps import COLUMN_BUDGET, LEVELS, ROW_BUDGET, heatmap
from stepscope.analysis.reports.html import render_report

SVG = "{http://www.w3.org/2000/svg}"
RANKS = 1024
PER_NODE = 8
STEPS = range(100, 108)
STRAGGLER_RANK = 700
SLOW_NODE_RANKS = range(8 * 37, 8 * 38)
# The stated bound: a report of 1024 ranks weighs under 512 KiB (it is about 90 KiB).
MAX_REPORT_BYTES_AT_SCALE = 512 * 1024


def node_of(rank: int) -> str:
    return f"gpu-node-{rank // PER_NODE:04d}"


def build_job(ranks: int, lag_us: dict[int, float], steps: range = STEPS, seed: int = 5):
    """`ranks` ranks, 8 per node, each arriving up to 2% of a step late at random."""
    rng = random.Random(seed)
    summaries = [
        rank_summary(
            rank,
            clock_offset_us=rng.uniform(-5_000, 5_000),
            lag_us=lag_us.get(rank, 0.0),
            steps=steps,
            jitter_us={(s, i): rng.uniform(0, 0.02 * STEP_US) for s in steps for i in range(2)},
        )
        for rank in range(ranks)
    ]
    return merge_ranks(
        summaries, {r: (f"worker-{r // PER_NODE}", node_of(r)) for r in range(ranks)}
    )


@pytest.fixture(scope="module")
def straggler_job():
    job = build_job(RANKS, {STRAGGLER_RANK: 0.2 * STEP_US})
    assert job.straggler is not None and job.straggler.rank == STRAGGLER_RANK
    return job


@pytest.fixture(scope="module")
def slow_node_job():
    job = build_job(RANKS, {rank: 0.3 * STEP_US for rank in SLOW_NODE_RANKS})
    assert job.slow_node is not None and job.slow_node.ranks == list(SLOW_NODE_RANKS)
    return job


def sections(html: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', html, re.DOTALL))


def svgs(fragment: str) -> list[ET.Element]:
    """Every inline SVG of the fragment, parsed as XML (which it must be)."""
    return [ET.fromstring(svg) for svg in re.findall(r"<svg.*?</svg>", fragment, re.DOTALL)]


def heatmap_rows(svg: ET.Element) -> list[tuple[int, int, set[int]]]:
    """(first rank, last rank, colour levels of its cells) per heatmap row."""
    return [
        (
            int(g.get("data-first")),
            int(g.get("data-last")),
            {int(p.get("data-level")) for p in g.iter(f"{SVG}path")},
        )
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "row"
    ]


def named_marks(svg: ET.Element, klass: str = "named-row") -> dict[str, ET.Element]:
    return {g.get("data-ranks"): g for g in svg.iter(f"{SVG}g") if g.get("class") == klass}


class _Table(HTMLParser):
    """The data-rank of every row and the text of every cell of one HTML fragment."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str | None, list[str]]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append((dict(attrs).get("data-rank"), []))
        elif tag == "td":
            self.rows[-1][1].append("")

    def handle_data(self, data):
        if self.rows and self.rows[-1][1]:
            self.rows[-1][1][-1] += data


def table_rows(fragment: str) -> list[tuple[str | None, list[str]]]:
    parser = _Table()
    parser.feed(fragment)
    return [row for row in parser.rows if row[1]]


def assert_rows_cover_every_rank_once(rows, ranks: int) -> None:
    expected = 0
    for first, last, _ in rows:
        assert first == expected and last >= first
        expected = last + 1
    assert expected == ranks


def test_lag_heatmap_gives_the_straggler_its_own_marked_row_at_1024_ranks(straggler_job):
    html = render_report(straggler_job)
    (lag_svg,) = svgs(sections(html)["lag-heatmap"])
    rows = heatmap_rows(lag_svg)
    assert_rows_cover_every_rank_once(rows, RANKS)
    assert len(rows) <= ROW_BUDGET + MAX_NAMED_RANKS
    own = [levels for first, last, levels in rows if first == last == STRAGGLER_RANK]
    assert own == [{LEVELS - 1}], "the straggler's row is its own and at the top of the scale"
    # Everyone else arrives within the jitter: the lower part of the scale.
    others = [max(levels) for first, _, levels in rows if first != STRAGGLER_RANK]
    assert max(others) < LEVELS // 2
    mark = named_marks(lag_svg)[str(STRAGGLER_RANK)]
    assert STRAGGLER in mark.get("data-reasons")
    label = "".join(t.text or "" for t in mark.iter(f"{SVG}text"))
    assert label.startswith(f"rank {STRAGGLER_RANK}: straggler")
    legend = [r for r in lag_svg.iter(f"{SVG}rect") if r.get("class") == "legend-swatch"]
    assert len(legend) == LEVELS
    titles = "".join(t.text or "" for t in lag_svg.iter(f"{SVG}text"))
    assert "arrival lag (ms)" in titles and "not captured" in titles
    assert "adjacent ranks are binned" in sections(html)["lag-heatmap"]


def test_heatmaps_give_each_slow_node_rank_a_row_and_mark_them_together(slow_node_job):
    html = render_report(slow_node_job)
    node = slow_node_job.slow_node.node
    for section in ("step-time-heatmap", "lag-heatmap"):
        (svg,) = svgs(sections(html)[section])
        rows = heatmap_rows(svg)
        assert_rows_cover_every_rank_once(rows, RANKS)
        own = {first for first, last, _ in rows if first == last}
        assert set(SLOW_NODE_RANKS) <= own
        mark = named_marks(svg)[" ".join(map(str, SLOW_NODE_RANKS))]
        assert mark.get("data-reasons").startswith(f"slow node {node}")
    (lag_svg,) = svgs(sections(html)["lag-heatmap"])
    slow = [levels for first, last, levels in heatmap_rows(lag_svg) if first in SLOW_NODE_RANKS]
    assert slow and all(levels == {LEVELS - 1} for levels in slow)


def test_a_binned_row_shows_its_largest_value_so_an_unnamed_outlier_still_shows(straggler_job):
    context = ReportContext(straggler_job)
    outlier = 513
    assert outlier not in context.named
    values = {r: {step: 1.0 for step in STEPS} for r in range(RANKS)}
    values[outlier][103] = 50.0
    (svg,) = svgs(heatmap(context, values, "probe", "ms"))
    rows = heatmap_rows(svg)
    (hot,) = [levels for first, last, levels in rows if first <= outlier <= last]
    assert hot == {0, LEVELS - 1}
    assert all(levels == {0} for first, last, levels in rows if not first <= outlier <= last)


def test_at_scale_distributions_replace_per_rank_bars_and_lines(straggler_job):
    html = render_report(straggler_job)
    parts = sections(html)
    assert "breakdown" not in parts and "step-times" not in parts
    assert "<polyline" not in html, "no line per rank"
    histogram_lag = svgs(parts["distributions"])[1]
    bins = [r for r in histogram_lag.iter(f"{SVG}rect") if r.get("class") == "bin"]
    assert sum(int(b.get("data-count")) for b in bins) == RANKS
    assert len(bins) <= 32
    mark = named_marks(histogram_lag, "named-mark")[str(STRAGGLER_RANK)]
    assert mark.get("data-reason") == STRAGGLER
    quantiles = {cells[0]: cells for _, cells in table_rows(parts["distributions"])}
    assert quantiles["step time (ms)"][1] == str(RANKS)
    lag_row = quantiles["arrival lag at collectives (ms)"]
    # Its max is the straggler's median lag, far past the p95 of the others.
    assert float(lag_row[-1]) == pytest.approx(
        next(a.median_lag_ms for a in straggler_job.arrivals if a.rank == STRAGGLER_RANK), abs=0.01
    )
    assert float(lag_row[-2]) < float(lag_row[-1]) / 4


def test_at_scale_the_rank_table_lists_only_the_named_ranks_with_why(straggler_job):
    merged = {0: ["rank 0"], STRAGGLER_RANK: [STRAGGLER], 5: [ROOM_IN_BUDGET], 6: [ROOM_IN_BUDGET]}
    html = render_report(straggler_job, merged, "full traces of ranks 0 (rank 0); 5-6")
    ranks_section = sections(html)["ranks"]
    rows = table_rows(ranks_section)
    listed = {int(rank): cells for rank, cells in rows if rank is not None}
    context = ReportContext(straggler_job, merged=merged)
    assert set(listed) == set(context.named)
    assert 0 in listed and STRAGGLER_RANK in listed and len(listed) <= MAX_NAMED_RANKS
    assert 5 not in listed and 6 not in listed, "taken only for room in the budget"
    assert "straggler" in listed[STRAGGLER_RANK][1]
    assert MERGED_REASON in listed[STRAGGLER_RANK][1]
    assert listed[STRAGGLER_RANK][2] == node_of(STRAGGLER_RANK)
    assert rows[-1][1][0] == f"median of {RANKS}"
    assert "(room in the budget): 5-6" in ranks_section
    assert "full traces of ranks 0 (rank 0); 5-6" in ranks_section


def test_the_report_stays_bounded_at_1024_ranks(straggler_job, slow_node_job):
    for job in (straggler_job, slow_node_job):
        html = render_report(job)
        assert len(html.encode()) < MAX_REPORT_BYTES_AT_SCALE
        # Far fewer marks than ranks x steps: rows are binned, runs of a colour merged.
        marks = html.count("<path") + html.count("<rect")
        assert marks < RANKS


def test_many_named_ranks_are_capped_and_the_rest_counted(straggler_job):
    late = list(range(100, 400))
    finding = Finding(
        id="late-ranks",
        severity=Severity.medium,
        title="Ranks wait for each other at collectives",
        evidence=Evidence(text="synthetic"),
        confidence=0.5,
        recommendation="balance",
        ranks=late,
    )
    job = straggler_job.model_copy(update={"findings": [*straggler_job.findings, finding]})
    html = render_report(job)
    listed = [rank for rank, _ in table_rows(sections(html)["ranks"]) if rank is not None]
    assert len(listed) == MAX_NAMED_RANKS
    assert str(STRAGGLER_RANK) in listed, "the verdict's own ranks come before findings'"
    assert "more named rank(s)" in sections(html)["ranks"]
    (svg,) = svgs(sections(html)["lag-heatmap"])
    assert len(heatmap_rows(svg)) <= ROW_BUDGET + MAX_NAMED_RANKS


def test_many_steps_are_binned_into_a_bounded_number_of_columns():
    steps = range(0, 3 * COLUMN_BUDGET)
    job = build_job(24, {3: 0.2 * STEP_US}, steps=steps)
    html = render_report(job)
    (svg,) = svgs(sections(html)["step-time-heatmap"])
    labels = [t.text for t in svg.iter(f"{SVG}text") if t.text and re.fullmatch(r"\d+-\d+", t.text)]
    assert labels and labels[0] == "0-2", "three adjacent steps per column"
    assert f"{len(steps)} steps are shown as {COLUMN_BUDGET} columns" in html


def test_a_four_rank_job_keeps_per_rank_bars_lines_and_rows():
    job = build_job(4, {2: 0.1 * STEP_US})
    assert job.straggler is not None and job.straggler.rank == 2
    html = render_report(job)
    parts = sections(html)
    assert "distributions" not in parts
    assert html.count("<polyline") == 4, "one step-time line per rank"
    bars = svgs(parts["breakdown"])[0]
    assert {t.text for t in bars.iter(f"{SVG}text")} >= {"rank 0", "rank 1", "rank 2 ⚑", "rank 3"}
    rows = table_rows(parts["ranks"])
    assert [rank for rank, _ in rows] == ["0", "1", "2", "3"]
    (lag_svg,) = svgs(parts["lag-heatmap"])
    heat = heatmap_rows(lag_svg)
    assert [(first, last) for first, last, _ in heat] == [(r, r) for r in range(4)]
    assert heat[2][2] >= {LEVELS - 1}
    axis = {t.text for t in lag_svg.iter(f"{SVG}text")}
    assert {"rank 0", "rank 1", "rank 2", "rank 3"} <= axis
    assert "rank 2: straggler" in "".join(t.text or "" for t in lag_svg.iter(f"{SVG}text"))
    assert "One row per rank, one column per step." in parts["lag-heatmap"]


def test_a_constant_quantity_gets_one_colour_and_a_legend_that_says_so():
    job = build_job(4, {})
    (svg,) = svgs(sections(render_report(job))["step-time-heatmap"])
    assert all(levels == {0} for _, _, levels in heatmap_rows(svg))
    assert "every cell 100" in "".join(t.text or "" for t in svg.iter(f"{SVG}text"))


def test_rank_rows_bin_unnamed_ranks_and_keep_each_named_rank_alone():
    named = {0: ["rank 0"], 700: [STRAGGLER], **{r: ["slow node n"] for r in SLOW_NODE_RANKS}}
    rows = rank_rows(range(RANKS), named, 64)
    assert len(rows) <= 64
    assert [rank for row in rows for rank in row.ranks] == list(range(RANKS))
    for row in rows:
        if row.binned:
            assert not set(row.ranks) & set(named)
            assert list(row.ranks) == list(range(row.ranks[0], row.ranks[-1] + 1))
    assert {row.ranks[0] for row in rows if row.reasons} == set(named)
    assert all(not row.binned for row in rank_rows(range(10), named, 64))
