"""Per-rank trace analysis: stream a Kineto trace once into a compact RankSummary.

The names below are loaded on first use (PEP 562), not when the package is imported:
the operator imports `stepscope.analysis.job_model` and `merge`, and must not load the
trace reader with them (it never opens a raw trace; tests audit its imports).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TraceReader": "stepscope.analysis.reader",
    "TraceReadError": "stepscope.analysis.reader",
    "summarize_rank": "stepscope.analysis.summary",
    "Breakdown": "stepscope.analysis.summary_model",
    "CollectiveRecord": "stepscope.analysis.summary_model",
    "CollectiveStat": "stepscope.analysis.summary_model",
    "DataLoadingStats": "stepscope.analysis.summary_model",
    "DeviceSplit": "stepscope.analysis.summary_model",
    "HostStats": "stepscope.analysis.summary_model",
    "MemoryStats": "stepscope.analysis.summary_model",
    "OpStat": "stepscope.analysis.summary_model",
    "RankSummary": "stepscope.analysis.summary_model",
    "StepRecord": "stepscope.analysis.summary_model",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
