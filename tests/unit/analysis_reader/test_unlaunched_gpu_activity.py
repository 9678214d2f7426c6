"""GPU kernels and copies without a CPU-side launch are counted, timed and noted.

The input is derived (derived_traces.drop_launches): a public DDP trace with the runtime
call of every 13th GPU activity removed, as when the profiler loses launch events.
"""

from __future__ import annotations

import logging
import shutil

import hta.trace_analysis as hta_trace_analysis  # a pinned dev dependency: never a skip
import pytest
from derived_traces import drop_launches, load, write

from stepscope.analysis import summarize_rank
from stepscope.analysis.reading.launch_links import MAX_ID_BLOCKS, LaunchLinks

TRACE = "ddp-2rank-nccl-rank0.json.gz"


@pytest.fixture(scope="module")
def derived(shared_traces, tmp_path_factory):
    folder = tmp_path_factory.mktemp("unlaunched")
    document, orphans = drop_launches(load(shared_traces / TRACE), every=13)
    return write(document, folder / "ddp-lost-launches.json.gz"), orphans


def test_every_unlaunched_activity_is_counted_with_its_time(derived):
    path, orphans = derived
    found = summarize_rank(path).unlaunched_gpu
    assert found.count == len(orphans) > 0
    assert found.time_ms == pytest.approx(sum(e["dur"] for e in orphans) / 1e3, abs=1e-3)
    assert found.time_pct == pytest.approx(100 * found.time_ms / found.gpu_event_ms, abs=1e-3)


def test_the_source_note_says_how_many_and_how_long(derived):
    path, orphans = derived
    notes = [n for n in summarize_rank(path).source_notes if "no runtime call has" in n]
    assert len(notes) == 1
    assert notes[0].startswith(f"{len(orphans)} of ")
    assert f"{sum(e['dur'] for e in orphans) / 1e3:.1f} ms" in notes[0]


def test_they_still_count_in_the_gpu_split(shared_traces, derived):
    path, _ = derived
    [original] = summarize_rank(shared_traces / TRACE).gpu
    [lost] = summarize_rank(path).gpu
    assert lost.compute_pct == original.compute_pct
    assert lost.idle_pct == original.idle_pct


def test_a_complete_trace_has_none_and_no_note(shared_traces):
    summary = summarize_rank(shared_traces / TRACE)
    assert summary.unlaunched_gpu.count == 0
    assert summary.unlaunched_gpu.gpu_event_count > 0
    assert not [n for n in summary.source_notes if "no runtime call has" in n]


def test_a_cpu_trace_is_not_checked(shared_traces):
    assert summarize_rank(shared_traces / "gloo-300rank-rank34.json.gz").unlaunched_gpu is None


def test_activity_before_its_launch_is_matched_at_the_end():
    links = LaunchLinks()
    links.ran(7, 5.0)
    links.ran("x", 2.0)  # no usable id: nothing launched it
    links.launched(7)
    check = links.check()
    assert (check.gpu_events, check.unlaunched, check.unlaunched_us) == (2, 1, 2.0)


def test_scattered_ids_stop_the_check_instead_of_growing():
    links = LaunchLinks()
    for index in range(MAX_ID_BLOCKS + 1):
        links.launched(index << 20)
    assert links.check() is None


@pytest.mark.filterwarnings("ignore::Warning")
def test_hta_drops_them_which_is_the_split_difference(derived, tmp_path, monkeypatch):
    """HTA on the derived trace matches our split of the same trace with the unlaunched
    activity removed: HTA joins GPU events to CPU events by correlation id."""
    path, orphans = derived
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # its rounding is the other difference
    (tmp_path / "hta").mkdir()
    shutil.copy(path, tmp_path / "hta" / path.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = hta_trace_analysis.TraceAnalysis(
        trace_dir=str(tmp_path / "hta"), include_last_profiler_step=True
    )
    [hta] = analysis.get_temporal_breakdown(visualize=False).to_dict("records")
    document = load(path)
    gone = {(e["ts"], e["name"]) for e in orphans}
    document["traceEvents"] = [
        e for e in document["traceEvents"] if (e.get("ts"), e.get("name")) not in gone
    ]
    assert len(gone) == len(orphans)
    [without] = summarize_rank(write(document, tmp_path / "without.json.gz")).gpu
    [ours] = summarize_rank(path).gpu
    assert abs(without.compute_pct - hta["compute_time_pctg"]) <= 0.05
    assert abs(without.idle_pct - hta["idle_time_pctg"]) <= 0.05
    # ... and on the trace itself we differ by about the unlaunched share.
    assert abs(ours.compute_pct - hta["compute_time_pctg"]) > 1.0
