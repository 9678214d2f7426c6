"""counters.json, written by the sampler from replayed readings, read back into the rank's
summary: statistics, the rank's own devices, and hostile files refused or ignored."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from stepscope_agent.publishing import with_counter_statistics
from support.nvml_replay import HW_SLOWDOWN, SW_POWER_CAP, a100_reading, record_counters

from stepscope.analysis.model.rank_summary import DeviceSplit, RankSummary
from stepscope.analysis.reading.counters import (
    MAX_COUNTER_BYTES,
    CounterFileError,
    load_counter_document,
    rank_counter_stats,
    read_counter_file,
    summarize_counters,
)
from stepscope.api.agent import StepStatistics, TraceSummary, parse_capture_summary
from stepscope.tiers import Tier


def two_gpus(samples: int = 20) -> dict:
    """GPU 0 busy at full clock; GPU 1 power-capped at 1005 MHz half of the time."""
    script = []
    for index in range(samples):
        capped = index % 2 == 0
        script.append(
            [
                a100_reading(sm_util_pct=90 + index % 5),
                a100_reading(
                    sm_util_pct=70,
                    power_mw=399_000 if capped else 300_000,
                    sm_clock_mhz=1005 if capped else 1410,
                    clock_event_reasons=SW_POWER_CAP if capped else 0,
                ),
            ]
        )
    return record_counters(script)


def test_statistics_come_in_the_metric_units():
    stats = summarize_counters(two_gpus())
    assert [d.device for d in stats.devices] == [0, 1]
    busy, capped = stats.devices
    assert busy.stat("sm_util_pct") == pytest.approx(92.0)
    assert busy.stat("sm_util_pct", "max") == 94.0
    assert busy.stat("mem_used_mib") == 31 * 1024
    assert busy.stat("mem_total_mib") == 40 * 1024
    assert busy.stat("power_w") == 330.0 and busy.stat("power_limit_w") == 400.0
    assert busy.sm_clock_ratio == 1.0 and busy.throttled_fraction == 0.0
    assert capped.throttled_fraction == 0.5 and capped.throttle_reasons == ["sw_power_cap"]
    assert capped.sm_clock_ratio == pytest.approx((1005 + 1410) / 2 / 1410, abs=1e-4)
    assert stats.interval_s == pytest.approx(0.1, abs=1e-3)
    assert stats.window_s == pytest.approx(1.9, abs=1e-3)
    # NVML's PCIe and NVLink calls failed on this replay, as on devices without them.
    assert busy.stat("pcie_tx_mbps") is None and busy.nvlink_tx_mib_per_s is None


def test_hardware_slowdown_is_a_slowdown_and_idle_is_not():
    script = [
        [a100_reading(clock_event_reasons=HW_SLOWDOWN | 0x1)],
        [a100_reading(clock_event_reasons=0x1)],
    ]
    [device] = summarize_counters(record_counters(script)).devices
    assert device.throttled_fraction == 0.5 and device.throttle_reasons == ["hw_slowdown"]


def test_a_rank_gets_the_devices_its_trace_used():
    stats = rank_counter_stats(two_gpus(), trace_devices=[1])
    assert [d.device for d in stats.devices] == [1]
    unknown = rank_counter_stats(two_gpus(), trace_devices=[])
    assert [d.device for d in unknown.devices] == [0, 1]
    assert any("this rank's device is not known" in note for note in unknown.notes)


def test_nothing_sampled_means_no_statistics():
    assert rank_counter_stats(record_counters([]), trace_devices=[0]) is None


def test_the_sidecar_puts_them_in_either_kind_of_summary(tmp_path):
    path = tmp_path / "counters.json"
    path.write_text(json.dumps(two_gpus()))
    traced = TraceSummary(
        tier=Tier.OPS,
        rank_summary=RankSummary(
            rank=3,
            device_kind="cuda",
            gpu=[
                DeviceSplit(
                    device=0,
                    window_start_us=0,
                    window_end_us=1,
                    window_ms=1,
                    compute_kernel_ms=1,
                    comm_kernel_ms=0,
                    memory_ms=0,
                    idle_ms=0,
                )
            ],
        ),
    )
    with_stats = with_counter_statistics(traced, path)
    assert [d.device for d in with_stats.rank_summary.counters.devices] == [0]
    timed = StepStatistics(tier=Tier.STEPS, rank=3, first_step=5, last_step=9)
    wire = with_counter_statistics(timed, path).to_wire()
    assert len(parse_capture_summary(wire).counters.devices) == 2


def test_hostile_events_are_counted_and_ignored():
    document = two_gpus(samples=2)
    document["traceEvents"] += [
        {"ph": "C", "name": "gpu0 sm_util_pct", "ts": 1.0, "args": {"sm_util_pct": "high"}},
        {"ph": "C", "name": "gpu0 rm -rf", "ts": 1.0, "args": {"rm -rf": 1}},
        {"ph": "C", "name": "gpu0 sm_util_pct", "ts": float("nan"), "args": {"sm_util_pct": 1}},
        {"ph": "C", "name": "gpu99999 power_w", "ts": 1.0, "args": {"power_w": 1}},
        {"ph": "X", "name": "gpu0 power_w", "ts": 1.0, "args": {"power_w": 1}},
        ["not", "an", "event"],
    ]
    stats = summarize_counters(document)
    assert stats.rejected_events == 6
    assert stats.devices[0].stat("sm_util_pct", "min") == 90.0
    assert "6 counter events were not in the sampler's format" in stats.notes[0]


def test_files_past_the_limits_are_refused(tmp_path):
    with pytest.raises(CounterFileError, match="refused"):
        load_counter_document(b" " * (MAX_COUNTER_BYTES + 1))
    with pytest.raises(CounterFileError, match="refused"):
        load_counter_document(b"[" * 10_000 + b"]" * 10_000)
    with pytest.raises(CounterFileError, match="traceEvents"):
        load_counter_document(b'{"traceEvents": {}}')
    big = tmp_path / "counters.json"
    big.write_bytes(b" " * (MAX_COUNTER_BYTES + 10))
    with pytest.raises(CounterFileError):
        read_counter_file(big)


def test_a_summary_with_unbounded_counter_lists_is_refused():
    timed = StepStatistics(tier=Tier.STEPS, rank=0, first_step=1, last_step=2).to_wire()
    timed["counters"] = {"devices": [{"device": i} for i in range(65)]}
    with pytest.raises(ValidationError, match="devices"):
        parse_capture_summary(timed)
