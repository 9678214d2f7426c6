"""Per-rank trace analysis: stream a Kineto trace once into a compact RankSummary."""

from stepscope.analysis.reader import TraceReader, TraceReadError
from stepscope.analysis.summary import summarize_rank
from stepscope.analysis.summary_model import (
    Breakdown,
    CollectiveRecord,
    CollectiveStat,
    DataLoadingStats,
    DeviceSplit,
    HostStats,
    MemoryStats,
    OpStat,
    RankSummary,
    StepRecord,
)

__all__ = [
    "Breakdown",
    "CollectiveRecord",
    "CollectiveStat",
    "DataLoadingStats",
    "DeviceSplit",
    "HostStats",
    "MemoryStats",
    "OpStat",
    "RankSummary",
    "StepRecord",
    "TraceReadError",
    "TraceReader",
    "summarize_rank",
]
