"""The build cache's lock: parallel test workers on a cold cache build one at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from stepscope_dev import build

# Holds the lock for argv[1] seconds and prints when it let go (monotonic clock, shared by
# every process on the machine).
HOLDER = textwrap.dedent(
    """
    import sys, time
    from stepscope_dev.build import cache_lock
    with cache_lock():
        print("held", flush=True)
        time.sleep(float(sys.argv[1]))
        print(time.monotonic(), flush=True)
    """
)


def _holder(cache, seconds: float) -> subprocess.Popen:
    env = {**os.environ, build.CACHE_ENV: str(cache)}
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(seconds)], stdout=subprocess.PIPE, text=True, env=env
    )


def test_a_second_process_waits_until_the_first_releases_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    holder = _holder(tmp_path, 1.0)
    try:
        assert holder.stdout.readline().strip() == "held"
        with build.cache_lock():
            acquired = time.monotonic()
        released = float(holder.stdout.readline())
    finally:
        holder.wait(timeout=30)
    assert acquired >= released


def test_the_lock_is_reentrant_within_one_thread_and_released_after(tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    calls = []

    @build.holding_cache_lock
    def inner() -> None:
        calls.append("inner")

    @build.holding_cache_lock
    def outer() -> None:
        inner()
        calls.append("outer")

    outer()
    assert calls == ["inner", "outer"]
    holder = _holder(tmp_path, 0)
    assert holder.stdout.readline().strip() == "held"
    assert holder.wait(timeout=30) == 0
