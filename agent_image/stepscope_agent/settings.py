"""Names of the environment variables the agent reads, and the defaults behind them.

This module is imported at start-up of every Python process that has the hook on its path,
so it imports nothing but ``os``. The sidecar's settings model (sidecar_settings.py) reads
the same names from here.
"""

from __future__ import annotations

import os

# The directory shared by the sidecar and the trainer: the Unix socket and the outbox of
# finished traces live here. Without it the hook stays completely inert.
AGENT_DIR_ENV = "STEPSCOPE_AGENT_DIR"
# Set to "0" to keep the hook inert even though the agent directory is present.
HOOK_ENABLED_ENV = "STEPSCOPE_HOOK"

SOCKET_NAME = "agent.sock"
OUTBOX_NAME = "outbox"

# How often the trainer's channel thread reports its step progress to the sidecar.
REPORT_INTERVAL_S = 0.5
# How long the channel waits before trying to reach a missing sidecar again (it backs off
# up to the maximum so a pod without a sidecar pays almost nothing).
RECONNECT_MIN_S = 0.5
RECONNECT_MAX_S = 5.0
# Recent steps kept for the step-time median and the status endpoint.
RING_CAPACITY = 256
# Steps used for the "recent median" the operator plans and judges with; its copy is
# stepscope.api.agent.RECENT_STEPS (this module imports nothing else, see above).
RECENT_STEPS = 20
# At interpreter exit, how long the trainer waits for events still queued for a connected
# sidecar (only when there are any), so a window that ended just before training did is
# still reported.
EXIT_FLUSH_S = 2.0
# Events waiting for the sidecar are dropped beyond this many, so a dead sidecar never makes
# the trainer's memory grow.
OUTBOX_EVENTS_MAX = 1024

# PyTorch's flight recorder: a ring of the last collectives per process, read by hang
# dumps. The hook sets its size at interpreter start, before any process group exists,
# unless the user set it (their value wins, 0 switches it off) or STEPSCOPE_FLIGHT_RECORDER
# is "0". 2,000 entries cost a few hundred KB; bench/bench_capture.py measures the time.
FLIGHT_RECORDER_ENV = "STEPSCOPE_FLIGHT_RECORDER"
TORCH_FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
FLIGHT_RECORDER_ENTRIES = 2000


def enable_flight_recorder() -> None:
    if os.environ.get(FLIGHT_RECORDER_ENV, "1") != "0":
        os.environ.setdefault(TORCH_FR_BUFFER_ENV, str(FLIGHT_RECORDER_ENTRIES))


def agent_dir() -> str | None:
    """The shared directory, or None when the hook should stay inert."""
    if os.environ.get(HOOK_ENABLED_ENV, "1") == "0":
        return None
    return os.environ.get(AGENT_DIR_ENV) or None


def socket_path(directory: str | os.PathLike) -> str:
    return os.path.join(directory, SOCKET_NAME)


def outbox_dir(directory: str | os.PathLike) -> str:
    return os.path.join(directory, OUTBOX_NAME)
