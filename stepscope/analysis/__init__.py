"""Per-rank trace analysis: stream a Kineto trace once into a compact RankSummary.

The names below are loaded on first use (PEP 562), not when the package is imported:
the operator imports `stepscope.analysis.model.job_summary` and `merge`, and must not load the
trace reader with them (it never opens a raw trace; tests audit its imports).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TraceReader": "stepscope.analysis.reading.reader",
    "TraceReadError": "stepscope.analysis.reading.reader",
    "summarize_rank": "stepscope.analysis.rank.summary",
    "Breakdown": "stepscope.analysis.model.rank_summary",
    "CollectiveRecord": "stepscope.analysis.model.rank_summary",
    "CollectiveStat": "stepscope.analysis.model.rank_summary",
    "DataLoadingStats": "stepscope.analysis.model.rank_summary",
    "DeviceSplit": "stepscope.analysis.model.rank_summary",
    "HostStats": "stepscope.analysis.model.rank_summary",
    "MemoryStats": "stepscope.analysis.model.rank_summary",
    "OpStat": "stepscope.analysis.model.rank_summary",
    "RankSummary": "stepscope.analysis.model.rank_summary",
    "StepRecord": "stepscope.analysis.model.rank_summary",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
