"""Where two ways into a node are equally long, the way made first wins, as in HTA.

HTA takes the longest path with networkx's ``dag_longest_path``, which keeps the first
predecessor (in the order the edges were added) among equally long ones; HTA adds a thread's
own edges before the sync edges. A blocking call that a kernel ended exactly as the thread
reached it is therefore the thread's time, not a wait on the kernel: the tie below.
"""

from __future__ import annotations

import pytest

from stepscope.analysis.rank.critical_path import PathEvents

STREAM = 7


def _step(kernel_end: float):
    """One thread: op A (0-10) launches a kernel (4 to `kernel_end`) from a launch call (2-3),
    then waits in cudaStreamSynchronize (12-20) for the stream, then runs op B (21-25)."""
    events = PathEvents()
    events.cpu_event(1, "A", 0.0, 10.0, -1)
    events.cpu_event(1, "cudaLaunchKernel", 2.0, 1.0, 1)
    events.gpu_event((0, STREAM), "kernel", 4.0, kernel_end - 4.0, 1)
    events.cpu_event(1, "cudaStreamSynchronize", 12.0, 8.0, 2)
    events.cpu_event(1, "B", 21.0, 4.0, -1)
    events.sync(0, {"cuda_sync_kind": "Stream Sync", "correlation": 2, "stream": STREAM})
    [path] = events.build([(1, 0.0, 25.0)]).steps
    return path


def test_a_tie_at_a_sync_goes_to_the_threads_own_edge():
    path = _step(kernel_end=10.0)  # the kernel's way and the thread's both reach 10 us
    assert (path.cpu_ms, path.gpu_ms, path.launch_ms) == (0.014, 0.0, 0.0)
    assert (path.between_ops_ms, path.sync_wait_ms) == (0.003, 0.008)
    assert path.length_ms == 0.014


def test_a_longer_kernel_takes_the_path_through_the_sync():
    path = _step(kernel_end=11.0)
    # A's start, its first 2 us, the launch delay (2), the kernel (7), the sync's wait on it
    # (11 -> 20), then B after 1 us between ops.
    assert (path.cpu_ms, path.launch_ms, path.gpu_ms) == (0.006, 0.002, 0.007)
    assert (path.sync_wait_ms, path.between_ops_ms) == (0.009, 0.001)
    assert path.length_ms == pytest.approx(0.015)
