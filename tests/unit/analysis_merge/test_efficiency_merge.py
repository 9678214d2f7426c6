"""The merged job carries MFU per rank and skipped steps; the findings, the report and the
console table show them.

Inputs: derived copies of the public ``sampled-128rank-*`` traces with an A100 added to
``deviceProperties`` (their sm80 kernels ran on one; the traces carry no device list),
a slice of one of them (below), and a real CPU training trace under a gradient scaler
recorded here (``analysis_reader/amp_cpu_trainer.py``).

The slice: no public trace with shapes is compute-bound (the sampled ranks idle for half
the step), so ``busy_slice`` keeps the first stretch of step 551 on rank 0 where the GPU
runs non-NCCL kernels with gaps of at most 50 us for at least 5 ms, drops every complete
event outside it and the original step ranges, and adds one ``ProfilerStep#551`` range
over exactly that stretch on the thread that had them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from unit.analysis_reader.derived_traces import load, write

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.rank.summary import summarize_rank
from stepscope.analysis.reports.html import render_report
from stepscope.cli.analyze import format_table

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920}
TRAINER = Path(__file__).parents[1] / "analysis_reader" / "amp_cpu_trainer.py"
GAP_US, MIN_SLICE_US = 50.0, 5000.0


def _with_a100(shared_traces: Path, name: str, folder: Path) -> Path:
    document = {**load(shared_traces / name), "deviceProperties": [A100]}
    return write(document, folder / name)


@pytest.fixture(scope="module")
def sampled_job(shared_traces, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sampled")
    names = ["sampled-128rank-rank0.json.gz", "sampled-128rank-rank1.json.gz"]
    return merge_ranks([summarize_rank(_with_a100(shared_traces, n, folder)) for n in names])


def busy_slice(document: dict) -> tuple[dict, float, float]:
    events = document["traceEvents"]
    [step] = [e for e in events if e.get("name") == "ProfilerStep#551"]
    kernels = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "kernel"
        and not e["name"].startswith("nccl")
        and step["ts"] <= e["ts"] < step["ts"] + step["dur"]
    )
    stretches: list[list[float]] = []
    for start, end in kernels:
        if stretches and start <= stretches[-1][1] + GAP_US:
            stretches[-1][1] = max(stretches[-1][1], end)
        else:
            stretches.append([start, end])
    start, end = next(s for s in stretches if s[1] - s[0] >= MIN_SLICE_US)
    kept = [
        e
        for e in events
        if e.get("ph") != "X"
        or (
            start <= e["ts"]
            and e["ts"] + e.get("dur", 0) <= end
            and not e["name"].startswith("ProfilerStep")
        )
    ]
    kept.append({**step, "ts": start, "dur": end - start})
    return {**document, "traceEvents": kept, "deviceProperties": [A100]}, start, end


@pytest.fixture(scope="module")
def busy(shared_traces, tmp_path_factory):
    document, start, end = busy_slice(load(shared_traces / "sampled-128rank-rank0.json.gz"))
    path = write(document, tmp_path_factory.mktemp("busy") / "sampled-busy.json")
    return merge_ranks([summarize_rank(path)]), document, start, end


@pytest.fixture(scope="module")
def amp_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("amp")
    subprocess.run([sys.executable, str(TRAINER), str(out)], check=True, capture_output=True)
    return merge_ranks([summarize_rank(out / "amp.json")])


def test_each_rank_carries_its_median_mfu_over_steps(sampled_job):
    rows = {row.rank: row for row in sampled_job.efficiency.utilization}
    assert sorted(rows) == [0, 1]
    for summary in sampled_job.ranks:
        steps = [s.mfu_pct for s in summary.utilization.steps]
        assert len(steps) == 2
        assert rows[summary.rank].median_mfu_pct == pytest.approx(
            statistics.median(steps), abs=1e-3
        )
        assert rows[summary.rank].device == "A100 SXM"
    medians = [row.median_mfu_pct for row in rows.values()]
    assert sampled_job.efficiency.median_mfu_pct == pytest.approx(
        statistics.median(medians), abs=1e-3
    )


def test_low_mfu_on_an_idle_step_is_not_a_compute_finding(sampled_job):
    # MFU is far below the threshold, but half the step is idle: other findings say why.
    assert sampled_job.efficiency.median_mfu_pct < 30
    assert sampled_job.bottleneck != "compute"
    assert "low-mfu" not in [f.id for f in sampled_job.findings]


def test_a_compute_bound_slice_with_low_mfu_names_why(busy):
    job, document, start, end = busy
    assert job.bottleneck == "compute"
    [finding] = [f for f in job.findings if f.id == "low-mfu"]
    # By hand: the leaf matmul ops that start in the slice (in this slice no op holds
    # another), their FLOPs, over the slice and the A100's FP32 peak.
    ops = [
        e
        for e in document["traceEvents"]
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")
    ]
    assert all(e["args"]["Input type"][1] == "float" for e in ops)
    flops = 0.0
    for op in ops:
        dims = op["args"]["Input Dims"]
        (m, k), (_, n) = dims[-2:] if op["name"] == "aten::mm" else dims[1:3]
        flops += 2.0 * m * k * n
    mfu = 100.0 * flops / (19.5e12 * (end - start) / 1e6)
    assert finding.evidence.numbers["median_mfu_pct"] == pytest.approx(mfu, abs=1e-3)
    [split] = job.ranks[0].gpu
    share = split.tensor_core_kernel_ms / split.compute_kernel_ms
    assert finding.evidence.numbers["tensor_core_fraction"] == pytest.approx(share, abs=1e-4)
    assert f"only {share:.0%} of compute-kernel time is on tensor cores" in finding.evidence.text
    assert f"{mfu:.1f}% of A100 SXM's dense peak" in finding.evidence.text


def test_skipped_steps_reach_the_job_and_a_finding(amp_job):
    [row] = amp_job.efficiency.skipped_steps
    assert (row.scaler_steps, row.skipped_count) == (6, 2)
    [finding] = [f for f in amp_job.findings if f.id == "skipped-steps"]
    assert finding.evidence.numbers == {
        "skipped_steps": 2.0,
        "scaler_steps": 6.0,
        "skipped_fraction": round(2 / 6, 4),
    }
    assert finding.severity == "medium"
    assert "Rank 0 skipped steps [3, 5]" in finding.evidence.text


def test_the_report_shows_mfu_skips_and_launches(sampled_job, amp_job):
    page = render_report(sampled_job)
    assert '<section id="efficiency">' in page
    for row in sampled_job.efficiency.utilization:
        assert f"<tr><td>{row.rank}</td><td>{row.median_mfu_pct:.1f}%</td>" in page
    assert "graph launches" not in page  # the sampled traces make no graph or sync calls
    page = render_report(amp_job)
    assert "MFU unknown: the trace shows no GPU" in page
    assert "<tr><td>0</td><td>2</td><td>6</td></tr>" in page


def test_the_console_table_prints_mfu_when_known(sampled_job, amp_job):
    table = format_table(sampled_job)
    assert f"MFU {sampled_job.efficiency.median_mfu_pct:.1f}%" in table.splitlines()[0]
    header = next(line for line in table.splitlines() if line.lstrip().startswith("rank"))
    assert "MFU%" in header
    for row in sampled_job.efficiency.utilization:
        line = next(x for x in table.splitlines() if x.split()[:1] == [str(row.rank)])
        assert f"{row.median_mfu_pct:.1f}" in line.split()
    assert "MFU" not in format_table(amp_job)
