"""The report's GPU section: counters and memory per rank, bounded at many ranks."""

from __future__ import annotations

import re

from support.nvml_replay import SW_POWER_CAP, a100_reading
from synthetic_ranks import rank_summary
from test_gpu_counter_findings import healthy, power_capped, with_counters, with_memory

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.reports.counters import TABLE_MAX_RANKS, gpu_section
from stepscope.analysis.reports.html import render_report


def test_each_rank_has_a_column_and_the_outlier_is_red():
    ranks = [
        with_counters(rank_summary(r), power_capped() if r == 1 else healthy()) for r in range(4)
    ]
    job = merge_ranks(ranks)
    section = gpu_section(job)
    assert '<section id="gpu"><h2>GPU counters and memory</h2>' in render_report(job)
    # Three counter charts with one column per rank.
    assert len(re.findall(r"<title>rank \d+: ", section)) == 3 * 4
    assert re.search(r'fill="#e45756"><title>rank 1: ', section)
    assert not re.search(r'fill="#e45756"><title>rank [023]: ', section)
    assert "outliers: rank 1" in section and "sw_power_cap" in section


def test_memory_against_capacity_is_plotted_from_the_trace():
    job = merge_ranks([with_memory(rank_summary(r), 30.0 + r, 20.0) for r in range(2)])
    section = gpu_section(job)
    assert "% of totalGlobalMem" in section
    assert "<title>rank 1: 77.5</title>" in section  # 31 of 40 GiB


def test_no_counters_and_no_capacity_means_no_section():
    job = merge_ranks([rank_summary(r) for r in range(2)])
    assert gpu_section(job) == ""
    assert "GPU counters" not in render_report(job)


def test_many_ranks_keep_the_table_to_the_outliers():
    count = TABLE_MAX_RANKS + 8
    ranks = [
        with_counters(
            rank_summary(r),
            [a100_reading(sm_clock_mhz=900, clock_event_reasons=SW_POWER_CAP)] * 4
            if r == 5
            else healthy(4),
        )
        for r in range(count)
    ]
    html = render_report(merge_ranks(ranks))
    table = html[html.index("<th>SM util %</th>") :]
    assert re.findall(r"<tr><td>(\d+)</td>", table) == ["5"]
    assert f"{count} ranks: the table shows the outliers" in html
