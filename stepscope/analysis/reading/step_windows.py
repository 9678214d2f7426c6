"""Step windows from ``ProfilerStep#N`` annotations, and which step a time is in."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable

StepSpan = tuple[int, float, float]  # step number, start_us, end_us


def step_windows(
    steps: list[tuple[int, float, float, object]],
) -> tuple[list[StepSpan], object, bool]:
    """Step windows in time order on the main thread (the one that steps), the
    main thread, and whether step numbers repeat. Overlapping annotations are
    clipped so that the earlier step keeps the shared time."""
    if not steps:
        return [], None, False
    main_tid = Counter(tid for *_, tid in steps).most_common(1)[0][0]
    ordered = sorted((s for s in steps if s[3] == main_tid), key=lambda s: s[1])
    windows: list[StepSpan] = []
    for number, began, end, _ in ordered:
        # A step that starts before the previous one ended is clipped to start at its end.
        start = max(began, windows[-1][2]) if windows else began
        if end > start:
            windows.append((number, start, end))
    numbers = [w[0] for w in windows]
    return windows, main_tid, len(set(numbers)) < len(numbers)


def step_lookup(windows: list[StepSpan]) -> Callable[[float], int | None]:
    """A function from a timestamp to the number of the step window holding it."""
    starts = [w[1] for w in windows]

    def step_of(ts: float) -> int | None:
        index = bisect_right(starts, ts) - 1
        if index >= 0 and ts < windows[index][2]:
            return windows[index][0]
        return None

    return step_of
