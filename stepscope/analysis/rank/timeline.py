"""Interval arithmetic for breakdowns: store intervals compactly, sweep them once.

Kineto traces are not written in time order (the CPU section comes before the
GPU section, and ``ProfilerStep`` annotations can come last), so intervals are
kept until the end of the file. To keep that small they live in flat float
arrays (16 bytes per interval), grouped by category and by a coarse time bin,
and an interval that starts inside the last one of its bin is merged into it
(nested CPU ops collapse to their outermost op as they arrive).

``IntervalStore.segments`` then sweeps one bin at a time (sort is
O(n log n) per bin, and only one bin's endpoints are in Python objects at
once) and yields maximal segments with the set of categories active in each,
as a bit mask. ``sum_by_window`` attributes those segments to step windows.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat

from stepscope.analysis.reading.trace_input import LimitExceeded

DEFAULT_BIN_US = 100_000.0
# One interval that spans a long time is split at every bin edge, so a single event of
# a hostile trace (a day long: 864,000 bins) could cost what millions of real ones do.
# Real traces create about a thousand (bin, category) tracks and split a few thousand
# times; these bounds are far above that and keep a store under ~40 MiB and seconds.
MAX_INTERVAL_TRACKS = 200_000
MAX_INTERVAL_SPLITS = 10_000_000

Segment = tuple[float, float, int]  # start_us, end_us, mask of active categories


class IntervalStore:
    """Intervals by category, in time bins of ``bin_us`` microseconds."""

    def __init__(self, bin_us: float = DEFAULT_BIN_US):
        self._bin_us = bin_us
        self._bins: dict[int, dict[Hashable, array]] = {}
        self._sealed_below = -(2**62)  # bins below this index were handed out by pop_before
        self.late = 0  # intervals that arrived for a bin already handed out
        self._tracks_left = MAX_INTERVAL_TRACKS
        self._splits_left = MAX_INTERVAL_SPLITS

    def add(self, category: Hashable, start: float, end: float) -> None:
        """Add ``[start, end)``; an interval crossing bins is split at their edges."""
        if not end > start:
            return
        width = self._bin_us
        index = int(start // width)
        bin_end = (index + 1) * width
        # This runs for most events of a trace, so it is inlined and uses plain
        # comparisons rather than min()/max() calls.
        while True:
            piece_end = end if end < bin_end else bin_end  # noqa: FURB136
            by_category = self._bins.get(index)
            if by_category is None:
                if index < self._sealed_below:
                    self.late += 1
                by_category = self._bins[index] = {}
            values = by_category.get(category)
            if values is None:
                self._tracks_left -= 1
                if self._tracks_left < 0:
                    raise LimitExceeded(
                        f"the trace's intervals need more than {MAX_INTERVAL_TRACKS:,} "
                        "(time bin, category) tracks (limit MAX_INTERVAL_TRACKS)",
                        0,
                    )
                by_category[category] = array("d", (start, piece_end))
            elif values[-2] <= start <= values[-1]:
                if piece_end > values[-1]:  # noqa: PLR1730
                    values[-1] = piece_end
            else:
                values.append(start)
                values.append(piece_end)
            if piece_end >= end:
                return
            self._splits_left -= 1
            if self._splits_left < 0:
                raise LimitExceeded(
                    f"the trace's intervals cross time bins more than {MAX_INTERVAL_SPLITS:,} "
                    "times (limit MAX_INTERVAL_SPLITS): events that last for days",
                    0,
                )
            index += 1
            start = piece_end
            bin_end += width

    def pop_before(self, time: float) -> IntervalStore | None:
        """Hand out, as a store of their own, the bins that end before ``time``.

        The caller sweeps them now and keeps only the totals, so memory stays
        bounded by the bins still open. An interval that later arrives for a
        handed-out bin is still kept (and counted in ``late``), but its
        overlap with what was handed out is no longer resolved.
        """
        if not math.isfinite(time):
            return None
        limit = int(time // self._bin_us)  # bins with index < limit end at or before time
        if limit <= self._sealed_below and not any(i < limit for i in self._bins):
            return None
        chunk = IntervalStore(self._bin_us)
        for index in [i for i in self._bins if i < limit]:
            chunk._bins[index] = self._bins.pop(index)
        self._sealed_below = max(self._sealed_below, limit)
        return chunk if chunk._bins else None

    def categories(self) -> set[Hashable]:
        return {category for by_category in self._bins.values() for category in by_category}

    def interval_count(self) -> int:
        return sum(len(v) // 2 for b in self._bins.values() for v in b.values())

    def segments(self, bits: Mapping[Hashable, int]) -> Iterator[Segment]:
        """Maximal segments in time order where the set of active categories is
        constant and not empty. ``bits`` maps each category to sweep to a bit
        index 0..61 (several categories may share one bit: a union); the
        yielded mask has bit ``1 << index`` set while any of them is active.
        """
        pending: Segment | None = None
        for index in sorted(self._bins):
            points: list[tuple[float, int]] = []
            extend = points.extend
            for category, values in self._bins[index].items():
                bit = bits.get(category)
                if bit is None:
                    continue
                # Built in C: the points of a bin are most of a sweep's objects.
                extend(zip(values[0::2], repeat(bit + 1)))
                extend(zip(values[1::2], repeat(-(bit + 1))))
            if not points:
                continue
            points.sort()
            depth = [0] * 64
            mask = 0
            previous = points[0][0]
            for time, signed in points:
                if time > previous and mask:
                    if pending is not None and pending[1] == previous and pending[2] == mask:
                        pending = (pending[0], time, mask)
                    else:
                        if pending is not None:
                            yield pending
                        pending = (previous, time, mask)
                if signed > 0:
                    depth[signed] += 1
                    mask |= 1 << (signed - 1)
                else:
                    depth[-signed] -= 1
                    if depth[-signed] == 0:
                        mask &= ~(1 << (-signed - 1))
                previous = time
        if pending is not None:
            yield pending


def sum_by_window(
    segments: Iterable[Segment],
    windows: Sequence[tuple[float, float]],
    label: Callable[[int], tuple[int, ...]],
    labels: int,
) -> list[list[float]]:
    """For each window, the time (us) per label of the segments inside it.

    ``windows`` are ``(start, end)`` sorted by start and not overlapping;
    ``label(mask)`` names the slots (out of ``labels``) a segment's time is
    added to: the tie-break rule, plus any informational slot such as
    "overlapped". Time not covered by any segment is not counted anywhere.
    """
    totals = [[0.0] * labels for _ in windows]
    if not windows:
        return totals
    # Time is summed per (window, mask) first and labelled once at the end: a segment
    # inside its window, the common case, then costs two comparisons and a dict update.
    by_mask: dict[tuple[int, int], float] = {}
    count = len(windows)
    index = 0
    window_start, window_end = windows[0]
    for start, end, mask in segments:
        if start >= window_end:
            while index < count and windows[index][1] <= start:
                index += 1
            if index == count:
                break  # every window ends before this segment, so before all later ones
            window_start, window_end = windows[index]
        if window_start <= start and end <= window_end:
            key = (index, mask)
            by_mask[key] = by_mask.get(key, 0.0) + (end - start)
            continue
        later = index
        while later < count and windows[later][0] < end:
            later_start, later_end = windows[later]
            overlap = min(end, later_end) - max(start, later_start)
            if overlap > 0:
                key = (later, mask)
                by_mask[key] = by_mask.get(key, 0.0) + overlap
            later += 1
    slots_by_mask: dict[int, tuple[int, ...]] = {}
    for (index, mask), total in by_mask.items():
        slots = slots_by_mask.get(mask)
        if slots is None:
            slots = slots_by_mask[mask] = label(mask)
        row = totals[index]
        for slot in slots:
            row[slot] += total
    return totals
