"""Name many ranks and pods in a few words: "17-19, 512" and "ddp-worker-16..18, ddp-worker-511".

At 1024 ranks a session that lost 26 of them cannot list each one in a condition message
or in status, yet a person reading `kubectl describe` needs to know which ones to look
at. Consecutive numbers collapse into ranges, pods that differ only in a trailing number
collapse the same way, and past a number of ranges the rest is counted, not listed, so
the text is bounded whatever the job size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Ranges listed before the rest is only counted; with a short pod name each range is
# about 20 characters, so a listing stays near 200 characters.
MAX_LISTED_RANGES = 8

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def _runs(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, de-duplicated numbers as (first, last) runs of consecutive values."""
    runs: list[tuple[int, int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


def _bounded(parts: list[str], max_ranges: int) -> str:
    if len(parts) <= max_ranges:
        return ", ".join(parts)
    hidden = len(parts) - max_ranges
    return ", ".join(parts[:max_ranges]) + f" and {hidden} more range{'s' if hidden > 1 else ''}"


def rank_ranges(ranks: Iterable[int], max_ranges: int = MAX_LISTED_RANGES) -> str:
    """'17-19, 512' for ranks 17, 18, 19 and 512; at most `max_ranges` ranges are listed."""
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in _runs(ranks)]
    return _bounded(parts, max_ranges)


def pod_ranges(pods: Iterable[str], max_ranges: int = MAX_LISTED_RANGES) -> str:
    """'ddp-worker-16..18, ddp-worker-511' for pods that differ only in a trailing number.

    `..` separates the numbers because pod names may hold `-`; names without a trailing
    number are listed as they are. Ranges come in name order, numbers ascending.
    """
    numbered: dict[str, list[int]] = {}
    widths: dict[tuple[str, int], str] = {}
    plain: list[str] = []
    for pod in set(pods):
        match = _TRAILING_NUMBER.match(pod)
        # A zero-padded number ("w-007") would not survive int(); list such names whole.
        if match is None or (len(match.group(2)) > 1 and match.group(2).startswith("0")):
            plain.append(pod)
            continue
        stem, number = match.group(1), int(match.group(2))
        numbered.setdefault(stem, []).append(number)
        widths[(stem, number)] = match.group(2)
    entries: list[tuple[str, int, str]] = [(pod, -1, pod) for pod in plain]
    for stem, numbers in numbered.items():
        for first, last in _runs(numbers):
            text = f"{stem}{first}" if first == last else f"{stem}{first}..{last}"
            entries.append((stem, first, text))
    return _bounded([text for _, _, text in sorted(entries)], max_ranges)


def describe_ranks(pairs: Iterable[tuple[int, str | None]], expected: int, what: str) -> str:
    """'ranks 17-19, 512 (4 of 1024) missing: pods ddp-worker-16..18, ddp-worker-511'.

    `pairs` are (rank, pod); `what` says what happened to them ("missing", "failed").
    """
    pairs = list(pairs)
    ranks = sorted({rank for rank, _ in pairs})
    pods = sorted({pod for _, pod in pairs if pod})
    noun = "rank" if len(ranks) == 1 else "ranks"
    text = f"{noun} {rank_ranges(ranks)} ({len(ranks)} of {expected}) {what}"
    if pods:
        text += f": {'pod' if len(pods) == 1 else 'pods'} {pod_ranges(pods)}"
    return text
