"""What the report's title names: the profiled job, its session and when it was captured.

A reader who has several reports open, or finds one in a bucket a month later, must see
whose steps these are before anything else. The operator's analysis Job knows the target,
the session and the capture time and passes them as a `ReportOrigin`; `stepscope analyze`
of a folder knows none of them, so the title falls back to what the job itself says: the
folder its traces came from and the window they cover (the steps, and how long it was).
Every value here may come from a tenant (a job or folder name); the page escapes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath

from stepscope.analysis.model.job_summary import JobSummary


@dataclass(frozen=True)
class ReportOrigin:
    """Where the profiled steps came from, as far as the caller knows.

    `target` names the training job (e.g. "PyTorchJob team-a/llama-ft"), `session` the
    ProfileSession as namespace/name, `captured_at` when its window opened; an empty
    value is simply left out of the title."""

    target: str = ""
    session: str = ""
    captured_at: datetime | None = None


def _folder(job: JobSummary) -> str:
    """The last name of the folder every rank's trace came from ('' when unknown).

    Sources are file paths or s3:// URIs; ranks kept in rank-N/ subfolders share the
    folder above them, which is the one a person named."""
    parents = {PurePosixPath(r.source).parent for r in job.ranks if r.source}
    if not parents:
        return ""
    common = min(parents, key=lambda p: len(p.parts))
    while common.parts and not all(p.is_relative_to(common) for p in parents):
        common = common.parent
    return common.name


def window_text(job: JobSummary) -> str:
    """The captured window in words, e.g. 'steps 3-7, 0.94 s'."""
    steps = job.common_steps or sorted({s.step for r in job.ranks for s in r.steps if s.step >= 0})
    parts = []
    if steps:
        parts.append(f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}–{steps[-1]}")
    spans = [
        r.window_end_us - r.window_start_us
        for r in job.ranks
        if r.window_start_us is not None and r.window_end_us is not None
    ]
    if spans and max(spans) > 0:
        parts.append(f"{max(spans) / 1e6:.2f} s")
    return ", ".join(parts)


def _utc(moment: datetime) -> str:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def report_title(job: JobSummary, origin: ReportOrigin | None, offline: bool = True) -> str:
    """What the report is of: the target or session, else (`offline`, a folder analysed by
    `stepscope analyze`) the folder, else the rank count. An analysis Job's traces sit in
    the session's storage folder, whose name is a uid, not something a person named."""
    subject = (origin.target or origin.session) if origin else (_folder(job) if offline else "")
    if subject:
        return f"{subject}: stepscope report"
    return f"stepscope report: {job.world_size} ranks"


def origin_facts(job: JobSummary, origin: ReportOrigin | None, offline: bool = True) -> list[str]:
    """The line under the title: session, capture time, folder, ranks and window."""
    facts = []
    if origin and origin.session:
        facts.append(f"session {origin.session}")
    if origin and origin.captured_at:
        facts.append(f"captured {_utc(origin.captured_at)}")
    if origin is None and offline and _folder(job):
        facts.append(f"traces in folder {_folder(job)}")
    facts.append(f"{job.world_size} rank" + ("" if job.world_size == 1 else "s"))
    window = window_text(job)
    if window:
        facts.append(f"window {window}")
    return facts
