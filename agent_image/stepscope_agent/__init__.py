"""stepscope's agent: the in-process step hook and the sidecar that serves it.

Training scripts need nothing from here: the hook counts optimizer steps by itself. Custom
loops, and resumed jobs that know their global step, can call :func:`step` and
:func:`set_global_step`. Both are no-ops when the hook is not active, so a script that
calls them runs unchanged without stepscope.
"""

from __future__ import annotations

__version__ = "0.1.0"


def step(global_step: int | None = None) -> None:
    """Mark the end of a training step.

    Once called, stepscope counts steps only from these calls (the optimizer hook stands
    down, so no step is counted twice). ``global_step`` says which step just ended, for a
    loop that keeps its own counter or a job resumed from a checkpoint.
    """
    from stepscope_agent import runtime

    runtime.explicit_step(global_step)


def set_global_step(global_step: int) -> None:
    """Say which global step is running now (for a job resumed from a checkpoint);
    counting continues from there."""
    from stepscope_agent import runtime

    runtime.set_global_step(global_step)
