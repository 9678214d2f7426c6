"""Which loop drives a session, by its `spec.mode`: profiling a window (`sessions.flow`) or
checking for a hang (`hang.watch`).

Above both packages, so the session lifecycle never imports the hang check that reuses it.
"""

from __future__ import annotations

from typing import Any

from stepscope.api.hang_status import SessionMode
from stepscope_operator.context import OperatorContext
from stepscope_operator.hang.watch import run_hang_check
from stepscope_operator.sessions import flow
from stepscope_operator.sessions.status import is_final
from stepscope_operator.sessions.status_writer import StatusWriter
from stepscope_operator.sessions.view import SessionView


async def drive_by_mode(
    ctx: OperatorContext, view: SessionView, writer: StatusWriter, stopped: Any
) -> None:
    if view.spec.mode == SessionMode.HANG_CHECK and not is_final(writer.phase):
        await run_hang_check(ctx, view, writer, stopped)
    else:
        await flow.drive_session(ctx, view, writer, stopped)


async def run_session(ctx: OperatorContext, body: dict[str, Any], stopped: Any) -> None:
    """Run one session in the loop its mode asks for (`sessions.flow.run_session`)."""
    await flow.run_session(ctx, body, stopped, drive=drive_by_mode)
