"""Turn one rank's finished window into uploaded artifacts, off the training path.

In order: compress the trace the trainer exported, cut the NVML samples to the window and
write them on the trace's clock, write the step timings, summarise the trace with the
shared analysis (if it is there), check the rank's byte budget, then upload each artifact
with its grant. Local files are removed whatever happens, so the shared volume never fills.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import re
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.analysis.model.rank_summary import RankSummary
from stepscope.api.agent import (
    CaptureFailure,
    CaptureRequest,
    CaptureSummary,
    DataWaitStats,
    FailureCode,
    RankGrants,
    StepStatistics,
    StepTimeStats,
    Tier,
    TraceSummary,
)
from stepscope_agent.nvml_sampling import counter_trace
from stepscope_agent.uploading import UploadError, upload_file

log = logging.getLogger(__name__)

# Kineto writes baseTimeNanoseconds either in the header (CPU-only traces) or in the trailer
# after the events (GPU traces); both are small, so only the two ends of the file are read.
_END_BYTES = 1 << 20
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')


@dataclass
class FinishedWindow:
    """What the trainer reported when its window ended."""

    rank: int
    pid: int
    first_step: int
    last_step: int
    steps: list[dict[str, Any]]
    trace_file: Path | None
    export_stall_ms: float | None


@dataclass
class PublishResult:
    """``failure`` is set when the rank failed; ``note`` is a remark on a rank that
    published (its trace could not be summarised)."""

    failure: CaptureFailure | None = None
    bytes_uploaded: int = 0
    artifact_keys: list[str] = field(default_factory=list)
    summary: CaptureSummary | None = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def reason(self) -> str | None:
        """Words for people: the failure's message, or the note."""
        return self.failure.message if self.failure is not None else self.note


def _failed(code: FailureCode, message: str, request: CaptureRequest, **fields) -> PublishResult:
    failure = CaptureFailure(code=code, message=message, start_step=request.start_step)
    return PublishResult(failure=failure, **fields)


def publish_rank(
    request: CaptureRequest,
    artifacts: FinishedWindow,
    samples: list,
    work_dir: Path,
) -> PublishResult:
    grants = request.grants_for(artifacts.rank)
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        files, summary = write_artifacts(
            request.capture_id, request.tier, artifacts, samples, work_dir
        )
        note = summary.trace_not_summarised if isinstance(summary, StepStatistics) else None
        result = PublishResult(summary=summary, note=note)
        total = sum(path.stat().st_size for path in files.values())
        if total > request.max_bytes_per_rank:
            sizes = ", ".join(f"{name} {path.stat().st_size}" for name, path in files.items())
            return _failed(
                FailureCode.OVER_BUDGET,
                f"artifacts are {total} bytes ({sizes}), over maxBytesPerRank "
                f"{request.max_bytes_per_rank}; use fewer steps or a lower tier",
                request,
                summary=summary,
            )
        _upload(files, grants, result)
        return result
    except UploadError as error:
        return _failed(error.code, str(error), request)
    except Exception as error:
        log.exception("publishing rank %s of %s failed", artifacts.rank, request.capture_id)
        return _failed(
            FailureCode.PREPARE_FAILED, f"could not prepare artifacts: {error!r}", request
        )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        if artifacts.trace_file is not None:
            artifacts.trace_file.unlink(missing_ok=True)


def remove_capture_folder(folder: Path) -> None:
    """Remove a capture's folder in the outbox once every rank of the pod has finished it.
    Not sooner: trainers export into it and ranks make their work folders in it, and a
    removal between another rank's mkdir and its write lost that rank's artifacts (seen at
    8 ranks per pod). Left in place when something is still in it."""
    with contextlib.suppress(OSError):
        folder.rmdir()


def _upload(files: dict[str, Path], grants: RankGrants, result: PublishResult) -> None:
    for name, path in files.items():
        grant = grants.for_artifact(name)
        result.bytes_uploaded += upload_file(path, grant)
        result.artifact_keys.append(grant.key)


def write_artifacts(
    capture_id: str, tier: Tier, artifacts: FinishedWindow, samples: list, work_dir: Path
) -> tuple[dict[str, Path], CaptureSummary]:
    """The rank's files in ``work_dir`` (trace.json.gz, counters.json, steps.json,
    summary.json) and its summary; uploading them is the caller's part."""
    files: dict[str, Path] = {}
    base_ns = 0
    summary: CaptureSummary | None = None
    note = None
    if artifacts.trace_file is not None:
        base_ns = trace_base_time_ns(artifacts.trace_file)
        files["trace"] = work_dir / "trace.json.gz"
        with (
            artifacts.trace_file.open("rb") as raw,
            gzip.open(files["trace"], "wb", compresslevel=6) as packed,
        ):
            shutil.copyfileobj(raw, packed, 1 << 20)
        rank_summary, note = summarize(files["trace"], artifacts.rank)
        if rank_summary is not None:
            summary = TraceSummary(tier=tier, rank_summary=rank_summary)
    if summary is None:
        summary = step_summary(artifacts, tier, note)
    files["counters"] = _write_json(
        work_dir / "counters.json", counter_trace(samples, base_ns, artifacts.pid)
    )
    if samples:
        summary = with_counter_statistics(summary, files["counters"])
    files["steps"] = _write_json(
        work_dir / "steps.json",
        {
            "captureId": capture_id,
            "rank": artifacts.rank,
            "tier": tier.value,
            "firstStep": artifacts.first_step,
            "lastStep": artifacts.last_step,
            "exportStallMs": artifacts.export_stall_ms,
            "steps": artifacts.steps,
        },
    )
    files["summary"] = _write_json(work_dir / "summary.json", summary.to_wire())
    return files, summary


def summarize(trace: Path, rank: int) -> tuple[RankSummary | None, str | None]:
    """The shared per-rank analysis, in a child process that yields to training (see
    SUMMARY_NICENESS): the agent still uploads the trace when the analysis is missing or
    fails, and says why in the rank's summary and reason."""
    command = [sys.executable, "-c", _SUMMARIZE_CHILD, str(trace), str(rank)]
    command.append(str(SUMMARY_NICENESS))
    try:
        child = subprocess.run(command, capture_output=True, timeout=SUMMARY_TIMEOUT_S, check=False)
        outcome, _, body = child.stdout.partition(b"\n")
        if child.returncode != 0 or outcome not in (b"summary", b"error"):
            lines = child.stderr.decode(errors="replace").strip().splitlines()
            return None, f"summary unavailable: {(lines or [f'exit {child.returncode}'])[-1]}"
        if outcome == b"error":
            return None, f"summary unavailable: {body.decode(errors='replace')}"
        return RankSummary.model_validate_json(body), None
    except Exception as error:  # noqa: BLE001 - analysis is best effort here
        return None, f"summary unavailable: {error!r}"


# The summary must not compete with training. The child lowers itself before it imports
# anything: pinned to one core (the last the sidecar may use), it never takes more than
# one; at nice 10 its CFS weight is 110 against 1024 for a nice-0 thread, so a training
# thread on that core in the same CPU cgroup gets about 90% of it and the summary about
# 10%. Across containers the kernel shares by cgroup weight instead, and the sidecar's
# whole container gets about its CPU request (100m by default) when the trainer wants
# every core. Idle cores it may use in full: a summary then takes seconds, not minutes.
SUMMARY_NICENESS = 10
# A trace at the rank budget (1 GiB of gzip, about 10 GB of JSON) takes minutes on a free
# core and ten times that on a busy one; past this the trace is uploaded unsummarised.
SUMMARY_TIMEOUT_S = 3600
_SUMMARIZE_CHILD = """
import os, sys
os.nice(int(sys.argv[3]))
os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
from stepscope.analysis import summarize_rank
try:
    reply = "summary\\n" + summarize_rank(sys.argv[1], rank=int(sys.argv[2])).model_dump_json()
except Exception as error:
    reply = "error\\n" + repr(error)
sys.stdout.write(reply)
"""


def with_counter_statistics(summary: CaptureSummary, counters: Path) -> CaptureSummary:
    """The summary with the statistics of the rank's counters.json, read back through the
    shared reader (bounded and validated, as every reader of the file does); a failure
    leaves the summary as it was, and the file is still uploaded."""
    try:
        from stepscope.analysis.reading.counters import rank_counter_stats, read_counter_file

        traced = summary.rank_summary if isinstance(summary, TraceSummary) else None
        devices = [split.device for split in traced.gpu] if traced is not None else []
        stats = rank_counter_stats(read_counter_file(counters), devices)
    except Exception:  # counters are best effort, like the summary
        log.exception("could not read back %s", counters)
        return summary
    if traced is not None:
        traced = traced.model_copy(update={"counters": stats})
        return summary.model_copy(update={"rank_summary": traced})
    return summary.model_copy(update={"counters": stats})


def step_summary(
    artifacts: FinishedWindow, tier: Tier, trace_not_summarised: str | None = None
) -> StepStatistics:
    """The steps tier's summary (and the fallback): step-time statistics only."""
    durations = [s["durationMs"] for s in artifacts.steps]
    waits = [s["dataWaitMs"] for s in artifacts.steps]
    return StepStatistics(
        tier=tier,
        rank=artifacts.rank,
        first_step=artifacts.first_step,
        last_step=artifacts.last_step,
        step_time_ms=StepTimeStats(
            p50=statistics.median(durations) if durations else None,
            max=max(durations, default=None),
        ),
        data_wait_ms=DataWaitStats(p50=statistics.median(waits) if waits else None),
        trace_not_summarised=trace_not_summarised,
    )


def trace_base_time_ns(trace: Path) -> int:
    """Kineto's ``baseTimeNanoseconds`` (event ``ts`` are microseconds after it), or 0 for
    traces whose ``ts`` are already unix microseconds."""
    with trace.open("rb") as file:
        head = file.read(_END_BYTES)
        file.seek(max(0, file.seek(0, 2) - _END_BYTES))
        tail = file.read()
    match = _BASE_TIME.search(head) or _BASE_TIME.search(tail)
    return int(match.group(1)) if match else 0


def _write_json(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document, separators=(",", ":")))
    return path
