"""NVML counter statistics of one rank's window: the part of the summary ``counters`` makes.

The agent's sampler (``stepscope_agent/nvml_sampling.py``) reads each GPU of the pod every
100 ms while a window is open and writes the samples as ``counters.json``, a Chrome trace
of counter events named ``gpu<index> <metric>``. ``counters.summarize_counters`` turns
that file into these statistics. Units are in the metric names: ``*_pct`` percent,
``*_mib`` MiB, ``*_w`` watts, ``*_mhz`` MHz; a missing value means the device did not
report that counter.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, computed_field

# A summary comes from the tenant's pod, so its lists are bounded where they are parsed:
# the reader makes at most 13 series, 5 reasons, 64 devices and 2 notes.
MAX_SERIES = 32
MAX_REASONS = 16
MAX_DEVICES = 64
MAX_NOTES = 8
# Reasons are NVML's slowdown names (sw_power_cap); notes are sentences of the reader.
REASON_MAX_LENGTH = 64
NOTE_MAX_LENGTH = 512


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CounterSeries(_Model):
    """One metric of one device over the window."""

    metric: str = Field(max_length=64)
    samples: int
    mean: float
    min: float
    max: float
    p50: float
    p95: float


class DeviceCounters(_Model):
    """One GPU's counters over the window, with what they say about its speed."""

    device: int = Field(description="NVML index of the GPU in its node.")
    series: list[CounterSeries] = Field(default_factory=list, max_length=MAX_SERIES)
    throttled_fraction: float | None = Field(
        None,
        description=(
            "Share of samples whose clock-event reasons include a slowdown (software power "
            "cap, hardware slowdown, thermal or power-brake); None without the counter."
        ),
    )
    throttle_reasons: list[Annotated[str, Field(max_length=REASON_MAX_LENGTH)]] = Field(
        default_factory=list,
        max_length=MAX_REASONS,
        description="The slowdown reasons seen, e.g. sw_power_cap.",
    )
    nvlink_tx_mib_per_s: float | None = None
    nvlink_rx_mib_per_s: float | None = None

    def stat(self, metric: str, statistic: str = "mean") -> float | None:
        for series in self.series:
            if series.metric == metric:
                return getattr(series, statistic)
        return None

    @computed_field
    @property
    def sm_clock_ratio(self) -> float | None:
        """Mean SM clock over the device's maximum SM clock, 0..1."""
        clock, top = self.stat("sm_clock_mhz"), self.stat("sm_clock_max_mhz", "max")
        return round(min(1.0, clock / top), 4) if clock is not None and top else None


class CounterStats(_Model):
    """Every GPU the rank's pod sampled during the window."""

    interval_s: float | None = Field(None, description="Median time between samples.")
    window_s: float = Field(0.0, description="From the first to the last sample.")
    devices: list[DeviceCounters] = Field(default_factory=list, max_length=MAX_DEVICES)
    rejected_events: int = Field(
        0, description="Counter events not understood (wrong shape, unknown name, bad value)."
    )
    notes: list[Annotated[str, Field(max_length=NOTE_MAX_LENGTH)]] = Field(
        default_factory=list, max_length=MAX_NOTES
    )

    def mean_over_devices(self, metric: str, statistic: str = "mean") -> float | None:
        values = [v for d in self.devices if (v := d.stat(metric, statistic)) is not None]
        return round(sum(values) / len(values), 3) if values else None

    def max_over_devices(self, metric: str, statistic: str = "max") -> float | None:
        values = [v for d in self.devices if (v := d.stat(metric, statistic)) is not None]
        return max(values) if values else None
