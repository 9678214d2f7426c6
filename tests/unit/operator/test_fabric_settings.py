"""The operator's link peaks reach the merge it runs: a platform that knows its fabric
states it once, and every session's collectives are judged against it."""

from __future__ import annotations

import pytest
from stepscope_operator.sessions.collecting import fabric_options, merge_job
from stepscope_operator.settings import SettingsError, load_settings
from stepscope_operator.targets.resolving import RankTarget

from stepscope.analysis.rank.summary import summarize_rank

# The public 2-rank A100 NCCL trace (rank 0); its host lists eight GPUs.
DDP = "ddp-2rank-nccl-rank0.json.gz"


def test_stated_peaks_replace_the_tables_figures(shared_traces):
    summaries = [summarize_rank(shared_traces / DDP)]
    targets = [RankTarget(rank=0, pod="trainer-0", namespace="ns", node="node-a")]
    unstated = merge_job(summaries, targets, fabric_options(load_settings({})))
    # The table's figure for the A100, on every group the trace holds.
    assert {group.peak.link for group in unstated.collective_bandwidth} == {"NVLink 3"}

    settings = load_settings({"STEPSCOPE_FABRIC_INTRA_PEAK_GBPS": "40"})
    stated = merge_job(summaries, targets, fabric_options(settings))
    assert stated.collective_bandwidth
    for group in stated.collective_bandwidth:
        assert group.peak.peak_gbps == 40.0
        # Each bucket is judged against the stated peak, not NVLink's 300 GB/s.
        for bucket in group.buckets:
            if bucket.busbw_best_gbps is not None:
                assert bucket.pct_of_peak == pytest.approx(
                    100 * bucket.busbw_best_gbps / 40.0, rel=1e-2, abs=0.01
                )


@pytest.mark.parametrize("value", ["0", "-3", "fast", "1e9"])
def test_a_bad_peak_names_its_variable(value):
    with pytest.raises(SettingsError, match="STEPSCOPE_FABRIC_INTER_PEAK_GBPS"):
        load_settings({"STEPSCOPE_FABRIC_INTER_PEAK_GBPS": value})
