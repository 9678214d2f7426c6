"""Running totals of a trainer's steps since it started, kept on the training thread for the
sidecar's always-on metrics (step_metrics.py).

The ring buffer (stepping.py) holds only the last few hundred steps, and a scrape may come
minutes apart, so the metrics need totals that never forget: how many steps ended, how long
they took in all, how long the thread waited for data and how long it spent in the hook.
Step durations are counted into fixed buckets, the shape of a Prometheus histogram: counts
from several ranks add up, so a job's p50 and p95 come from one PromQL expression, which a
per-rank quantile (a summary) could never give. Adding a step costs one bisection over the
bounds and a few additions; the channel thread copies the totals twice a second into its
progress report, so nothing here ever waits on the sidecar. Standard library only: this runs
in the trainer.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds (seconds, inclusive) of the step-duration buckets; one more bucket counts the
# steps longer than the last. Dense between 0.1 s and 2.5 s, where most training steps fall,
# so an interpolated quantile there is within about a factor of 1.5 of the truth.
STEP_SECONDS_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.5,
    5.0,
    10.0,
    30.0,
)
BUCKET_COUNT = len(STEP_SECONDS_BUCKETS) + 1


class StepTotals:
    """Only the training thread writes; the channel thread reads a copy (``snapshot``)."""

    __slots__ = ("bucket_counts", "data_wait_seconds", "hook_seconds", "step_seconds")

    def __init__(self) -> None:
        # Not cumulative: bucket i counts the steps with BUCKETS[i-1] < duration <= BUCKETS[i].
        self.bucket_counts = [0] * BUCKET_COUNT
        self.step_seconds = 0.0
        self.data_wait_seconds = 0.0
        self.hook_seconds = 0.0

    def add(self, duration_s: float, data_wait_s: float, hook_s: float) -> None:
        self.bucket_counts[bisect_left(STEP_SECONDS_BUCKETS, duration_s)] += 1
        self.step_seconds += duration_s
        self.data_wait_seconds += data_wait_s
        self.hook_seconds += hook_s

    @property
    def steps(self) -> int:
        return sum(self.bucket_counts)

    def snapshot(self) -> tuple[list[int], float, float, float]:
        """(bucket counts, step seconds, data-wait seconds, hook seconds); copying the list
        is atomic under the GIL, so the counts always sum to a whole number of steps."""
        return (
            list(self.bucket_counts),
            self.step_seconds,
            self.data_wait_seconds,
            self.hook_seconds,
        )
