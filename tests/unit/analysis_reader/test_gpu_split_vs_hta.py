"""Our per-device GPU split agrees with Holistic Trace Analysis's temporal
breakdown, computed here by running HTA itself on a copy of each trace.

HTA's quantities: compute = union of non-NCCL, non-memory kernels; non-compute
= the rest of the kernel/memcpy/memset union; idle = gaps, all over the span
from the first to the last GPU activity (``include_last_profiler_step=True``
so that it looks at the same steps we do).
"""

from __future__ import annotations

import logging
import shutil

import hta.trace_analysis as hta_trace_analysis  # a pinned dev dependency: never a skip
import pytest

from stepscope.analysis import summarize_rank

AGREEING = [
    "ddp-2rank-nccl-rank0.json.gz",
    "resnet-1rank-nccl-rank0.json.gz",
    "sampled-128rank-rank0.json.gz",
    "sampled-128rank-rank1.json.gz",
    "rocm-mi250-minitoy.json.gz",
]
HTA_FAILS = ["gloo-300rank-rank34.json.gz", "no-distributed-info.json.gz"]
TOLERANCE_PP = 2.0

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def hta_temporal_breakdown(trace, workdir):
    shutil.copy(trace, workdir / trace.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = hta_trace_analysis.TraceAnalysis(
        trace_dir=str(workdir), include_last_profiler_step=True
    )
    return analysis.get_temporal_breakdown(visualize=False).to_dict("records")


@pytest.mark.parametrize("name", AGREEING)
def test_device_split_matches_hta(shared_traces, tmp_path, name):
    [hta] = hta_temporal_breakdown(shared_traces / name, tmp_path)
    [ours] = summarize_rank(shared_traces / name).gpu
    assert ours.window_ms * 1e3 == pytest.approx(hta["kernel_time(us)"], rel=0.01)
    assert abs(ours.compute_pct - hta["compute_time_pctg"]) <= TOLERANCE_PP
    assert abs(ours.comm_pct + ours.memory_pct - hta["non_compute_time_pctg"]) <= TOLERANCE_PP
    assert abs(ours.idle_pct - hta["idle_time_pctg"]) <= TOLERANCE_PP


@pytest.mark.parametrize("name", HTA_FAILS)
def test_we_answer_where_hta_cannot(shared_traces, tmp_path, name):
    # HTA indexes the first kernel of the trace, and these have none.
    with pytest.raises(IndexError):
        hta_temporal_breakdown(shared_traces / name, tmp_path)
    summary = summarize_rank(shared_traces / name, rank=3)
    assert summary.steps and summary.breakdown.total_ms > 0
    assert summary.collective_stats


EXACT_PP = 0.05


@pytest.mark.parametrize("name", AGREEING)
def test_without_hta_rounding_the_splits_are_the_same(shared_traces, tmp_path, monkeypatch, name):
    """HTA rounds nanosecond timestamps inward to whole microseconds (start up, end down),
    which shortens every kernel by up to 2 us; that is the whole residual difference."""
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    [hta] = hta_temporal_breakdown(shared_traces / name, tmp_path)
    [ours] = summarize_rank(shared_traces / name).gpu
    assert abs(ours.compute_pct - hta["compute_time_pctg"]) <= EXACT_PP
    assert abs(ours.comm_pct + ours.memory_pct - hta["non_compute_time_pctg"]) <= EXACT_PP
    assert abs(ours.idle_pct - hta["idle_time_pctg"]) <= EXACT_PP
