"""The contract between the operator and the analysis Job it runs in a tenant's namespace.

Whatever reads raw traces or builds files from many ranks (the merged Perfetto trace,
the HTML report) runs as a Kubernetes Job beside the training job, never inside the
shared operator (DESIGN §10). The operator writes an `AnalysisPlan` to the session's
prefix and gives the Job one presigned GET of it in `PLAN_URL_ENV`; the plan holds
presigned GETs for the inputs (the job summary, the chosen ranks' traces) and upload
grants for the outputs, so the Job's pod holds no storage credentials. The Job answers
with an `AnalysisResult` (uploaded through its own grant), which the operator reads
within `MAX_RESULT_BYTES`, like any other tenant-written object.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from stepscope.api.agent import ArtifactGrant, WireModel
from stepscope.api.text import BoundedText

PLAN_URL_ENV = "STEPSCOPE_ANALYSIS_PLAN_URL"
"""The analysis Job's only setting: a presigned GET of its plan."""
ANALYSIS_JOB_COMMAND = ("stepscope-analysis-job",)
"""The console script (pyproject.toml) the Job's container runs, from the agent image."""

PLAN_SCHEMA_VERSION = 1
MAX_RESULT_BYTES = 64 * 1024
MAX_RESULT_NOTES = 32
NOTE_MAX_LENGTH = 500


class TraceInput(WireModel):
    """One chosen rank's stored trace: where to read it and why it is in the merged trace."""

    rank: int = Field(ge=0)
    name: str = Field(description="What to call the trace in notes (its s3:// URI).")
    get_url: str = Field(description="Presigned GET of rank-<r>/trace.json.gz.")
    reasons: list[str] = Field(default_factory=list)
    counters_url: str | None = Field(
        None, description="Presigned GET of rank-<r>/counters.json (NVML samples), if any."
    )


class AnalysisPlan(WireModel):
    """What the analysis Job reads and writes; made by the operator for one session."""

    schema_version: int = PLAN_SCHEMA_VERSION
    session: str = Field(
        description="namespace/name of the ProfileSession, for logs and the report's title."
    )
    target: str = Field("", description="The profiled job (pytorchjob/llama-ft), for the title.")
    captured_at: datetime | None = Field(
        None, description="When the session's capture window opened, for the report's title."
    )
    summary_url: str = Field(description="Presigned GET of the job summary (summary.json).")
    traces: list[TraceInput] = Field(default_factory=list)
    selection: str = Field("", description="Which ranks are in the merged trace, and why.")
    over_budget_ranks: list[int] = Field(default_factory=list)
    merged_trace: ArtifactGrant | None = Field(
        None, description="Upload grant of merged.trace.json.gz; None when no trace is stored."
    )
    report: ArtifactGrant
    result: ArtifactGrant


class AnalysisResult(WireModel):
    """What the analysis Job did: the ranks it merged and notes on what it had to cut."""

    merged_ranks: list[int] = Field(default_factory=list, max_length=4096)
    merged_events: int = 0
    report_written: bool = False
    notes: list[BoundedText(NOTE_MAX_LENGTH)] = Field(
        default_factory=list, max_length=MAX_RESULT_NOTES
    )
    error: BoundedText(NOTE_MAX_LENGTH) | None = None
