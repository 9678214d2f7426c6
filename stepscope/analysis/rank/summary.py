"""summarize_rank: one rank's trace in, one ``RankSummary`` out.

``summarize_rank`` is what the sidecar runs on its own rank's trace and what
``stepscope analyze`` runs per file. It reads the trace once with
``TraceReader`` and folds the events into a ``RankSummaryBuilder`` (``builder``);
the builder never sees a path (parse once, analyse many). Here a trace that cannot
be read, or holds a value of the wrong kind, becomes one ``TraceReadError``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.analysis.rank.builder import RankSummaryBuilder
from stepscope.analysis.reading.reader import TraceReader, TraceReadError
from stepscope.analysis.reading.trace_input import LimitExceeded


def summarize_rank(
    source: str | Path,
    rank: int | None = None,
    *,
    allow_partial: bool = False,
    opener: Callable[[], BinaryIO] | None = None,
) -> RankSummary:
    """Summarise one rank's Kineto trace (``.json`` or ``.json.gz``).

    ``rank`` is used when the trace does not say (no ``distributedInfo``);
    when both do and disagree, the trace wins and a note says so.

    A file that cannot be read to its end raises ``TraceReadError``. With
    ``allow_partial=True`` a truncated or corrupt file instead yields the
    summary of what was read, flagged ``partial`` with the reason, as long as
    at least one event was read; an empty or unparseable-from-the-start file
    always raises. ``opener``, when given, returns the trace's bytes as a stream (an
    S3 object, say); ``source`` then only names it.
    """
    reader = TraceReader(source, opener)
    builder = RankSummaryBuilder()
    try:
        try:
            events = reader.events(skip=builder.UNREAD_KINDS)
            first = next(events, None)
            if first is not None:
                # The first chunk, read by now, holds Kineto's flags.
                if reader.leading_keys().get("profile_memory"):
                    builder.memory.index_ops()
                builder.add(first)
            builder.add_all(events)
        except TraceReadError as err:
            if not allow_partial or reader.event_count == 0:
                raise
            return builder.build(
                reader.header,
                rank=rank,
                source=Path(source).name,
                partial_reason=str(err),
                event_count=reader.event_count,
            )
        return builder.build(
            reader.header, rank=rank, source=Path(source).name, event_count=reader.event_count
        )
    except LimitExceeded as err:
        raise TraceReadError(source, 0, str(err), truncated=False) from err
    except _UNEXPECTED_VALUE as err:
        # Values of the right JSON type can still be wrong where the analysis meets
        # them (a list where a collective's name belongs, a string world size): the
        # trace is at fault, so it is reported as one, never as a traceback.
        raise TraceReadError(
            source,
            0,
            f"unexpected value near event {reader.event_count}: "
            f"{type(err).__name__}: {_first_line(err)}",
            truncated=False,
        ) from err


# What a wrongly typed value in an event's args or the header raises in the analysis;
# pydantic's ValidationError is a ValueError.
_UNEXPECTED_VALUE = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else ""
