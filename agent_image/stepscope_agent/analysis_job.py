"""The analysis Job: build a session's merged trace and report beside the training job.

The operator runs this (console script `stepscope-analysis-job`, from the agent image)
as a Kubernetes Job in the tenant's namespace, so the only process that ever opens a raw
trace of many ranks is one that runs with the tenant's own resources and limits. It
holds no storage credentials: it reads its `AnalysisPlan` through the presigned GET in
``STEPSCOPE_ANALYSIS_PLAN_URL``, the job summary and the chosen ranks' traces through
the plan's presigned GETs, and writes the merged trace, the report and its
`AnalysisResult` through the plan's upload grants.

A rank trace that breaks the reader's limits is cut and named in the result's notes
(the merged trace still opens). Anything else that goes wrong (an unreadable summary,
a refused upload) ends the Job with exit status 1 after a last attempt to upload the
result with the error, so the operator can say what happened.
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.reading.counters import (
    MAX_COUNTER_BYTES,
    CounterFileError,
    load_counter_document,
)
from stepscope.analysis.reports.html import render_report
from stepscope.analysis.reports.merged_trace import write_merged_trace
from stepscope.analysis.reports.origin import ReportOrigin
from stepscope.analysis.reports.rank_track import all_ranks_track
from stepscope.api.analysis_job import (
    MAX_RESULT_NOTES,
    PLAN_URL_ENV,
    AnalysisPlan,
    AnalysisResult,
)
from stepscope_agent.uploading import REQUEST_TIMEOUT_S, UploadError, upload_file

# The plan names at most a few hundred ranks' URLs; the summary of 1024 ranks is at most
# a few hundred MB (summary_model caps each rank), so both are read whole.
MAX_PLAN_BYTES = 16 * 1024 * 1024
MAX_SUMMARY_BYTES = 2 * 1024 * 1024 * 1024


class AnalysisJobError(Exception):
    """The Job cannot do its work; the message says which input or output and why."""


def _get(url: str, what: str, limit: int) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
            body = response.read(limit + 1)
    except OSError as error:
        raise AnalysisJobError(f"cannot read {what}: {error}") from error
    if len(body) > limit:
        raise AnalysisJobError(f"{what} is larger than {limit} bytes")
    return body


def _opener(url: str):
    def open_trace() -> BinaryIO:
        return urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S)

    return open_trace


def build_artifacts(plan: AnalysisPlan, job: JobSummary, workdir: Path) -> AnalysisResult:
    """Write and upload the report and (when a rank trace is stored) the merged trace."""
    result = AnalysisResult()
    report = workdir / "report.html"
    merged = {trace.rank: trace.reasons for trace in plan.traces}
    origin = ReportOrigin(target=plan.target, session=plan.session, captured_at=plan.captured_at)
    report.write_text(render_report(job, merged, plan.selection, origin=origin), encoding="utf-8")
    upload_file(report, plan.report)
    result.report_written = True
    if plan.merged_trace is None:
        return result
    merged = workdir / "merged.trace.json.gz"
    chosen = {trace.rank for trace in plan.traces}
    about = {
        "stepscope_ranks": {str(t.rank): t.reasons for t in plan.traces},
        "stepscope_selection": plan.selection,
        "stepscope_over_budget_ranks": plan.over_budget_ranks,
        "stepscope_all_ranks_track": "processes 'all ranks: steps' and 'all ranks: arrival "
        "lag' hold every rank's step boundaries and collective arrival lag",
    }
    counters, notes = _counter_documents(plan)
    with (
        merged.open("wb") as spool,
        gzip.GzipFile(fileobj=spool, mode="wb", compresslevel=6) as out,
    ):
        written = write_merged_trace(
            [(trace.rank, _opener(trace.get_url)) for trace in plan.traces],
            job.offsets_us,
            out,
            {trace.rank: trace.name for trace in plan.traces},
            prelude=all_ranks_track(job, chosen),
            about=about,
            counters=counters,
        )
    upload_file(merged, plan.merged_trace)
    result.merged_ranks = sorted(chosen)
    result.merged_events = written.events
    result.notes = (written.notes() + notes)[:MAX_RESULT_NOTES]
    return result


def _counter_documents(plan: AnalysisPlan) -> tuple[dict[int, dict], list[str]]:
    """Each chosen rank's counters.json, read within the counters reader's limits. A rank
    without one (no GPU) is simply left out; one that is refused is named in a note."""
    documents, notes = {}, []
    for trace in plan.traces:
        if trace.counters_url is None:
            continue
        try:
            with urllib.request.urlopen(trace.counters_url, timeout=REQUEST_TIMEOUT_S) as body:
                documents[trace.rank] = load_counter_document(body.read(MAX_COUNTER_BYTES + 1))
        except urllib.error.HTTPError as error:
            if error.code != 404:
                notes.append(f"merged trace: rank {trace.rank} counters unreadable: {error}")
        except (OSError, CounterFileError) as error:
            notes.append(f"merged trace: rank {trace.rank} counters left out: {error}"[:500])
    return documents, notes


def run(plan_url: str, workdir: Path) -> int:
    plan = AnalysisPlan.model_validate_json(_get(plan_url, "the analysis plan", MAX_PLAN_BYTES))
    try:
        summary = _get(plan.summary_url, "the job summary (summary.json)", MAX_SUMMARY_BYTES)
        try:
            job = JobSummary.model_validate_json(summary)
        except ValueError as error:
            raise AnalysisJobError(
                f"the job summary (summary.json) is not valid: {error}"
            ) from None
        result = build_artifacts(plan, job, workdir)
    except (AnalysisJobError, UploadError) as error:
        result = AnalysisResult(error=str(error))
        print(f"stepscope-analysis-job: {error}", file=sys.stderr)
        _write_result(result, plan, workdir)
        return 1
    _write_result(result, plan, workdir)
    print(
        f"stepscope-analysis-job: {plan.session}: report written; merged trace of ranks "
        f"{result.merged_ranks} ({result.merged_events} events)"
    )
    return 0


def _write_result(result: AnalysisResult, plan: AnalysisPlan, workdir: Path) -> None:
    path = workdir / "result.json"
    path.write_text(result.model_dump_json(by_alias=True, exclude_none=True))
    try:
        upload_file(path, plan.result)
    except UploadError as error:
        # The Job's exit status still tells the operator; the note is only the detail.
        print(f"stepscope-analysis-job: cannot upload the result: {error}", file=sys.stderr)


def main() -> None:
    plan_url = os.environ.get(PLAN_URL_ENV)
    if not plan_url:
        sys.exit(f"stepscope-analysis-job: {PLAN_URL_ENV} is not set; the operator sets it")
    with tempfile.TemporaryDirectory(prefix="stepscope-analysis-") as workdir:
        try:
            sys.exit(run(plan_url, Path(workdir)))
        except (AnalysisJobError, ValueError) as error:
            # No plan, or not one: there is no grant to report through, only the exit status.
            sys.exit(f"stepscope-analysis-job: cannot use the analysis plan: {error}")


if __name__ == "__main__":
    main()
