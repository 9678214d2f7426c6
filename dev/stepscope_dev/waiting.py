"""Bounded polling, the one home of "wait until" for the harness, the demo and the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """Call `condition` until it returns something truthy and return that; raise
    `TimeoutError` naming `what` and the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {what}; last: {result!r}"
            )
        time.sleep(interval)
