"""`stepscope analyze PATH`: summarise per-rank traces, merge them and write the outputs.

A thin layer: it finds the traces, summarises them one at a time with
`summarize_rank`, merges with `merge_ranks` and writes what `render_report` and
`write_merged_trace` produce, exactly as the operator does. A folder of hang dumps gets
the hang verdict instead.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

from stepscope.analysis.merging.merge import MergeError, merge_ranks, split_into_jobs
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import Breakdown, RankSummary
from stepscope.analysis.rank.summary import summarize_rank
from stepscope.analysis.reading.reader import TraceReadError
from stepscope.analysis.reading.trace_sources import TraceSource, find_sources
from stepscope.analysis.reports.html import render_report
from stepscope.analysis.reports.merged_trace import write_merged_trace
from stepscope.hang.offline import cmd_analyze_hangs, holds_hang_dumps
from stepscope.storage import SessionArtifact

TOP_FINDINGS = 5


class NoReadableTraceError(Exception):
    """Every trace found failed to read; each was named in a note as it was skipped."""


def _summarize(source: TraceSource) -> RankSummary:
    """Summarise one source, streamed straight from its file or S3 object."""
    summary = summarize_rank(source.name, rank=source.rank_hint, opener=source.open)
    return summary.model_copy(update={"source": source.name})


def _placement(path: Path | None) -> dict[int, tuple[str, str]] | None:
    if path is None:
        return None
    raw = json.loads(path.read_text())
    try:
        return {int(rank): (where.get("pod", ""), where["node"]) for rank, where in raw.items()}
    except (KeyError, AttributeError, ValueError) as error:
        raise ValueError(
            f'--placement {path}: expected {{"<rank>": {{"pod": ..., "node": ...}}}}'
        ) from error


def format_table(job: JobSummary) -> str:
    """The console view: ranks, straggler and the top findings."""
    arrivals = {a.rank: a for a in job.arrivals}
    labels = [c.removesuffix("_ms").replace("comm_exposed", "comm") for c in Breakdown.CATEGORIES]
    header = f"{'rank':>5} {'step ms':>9} " + " ".join(f"{x[:9] + '%':>10}" for x in labels)
    lines = [header + f" {'overlap%':>9} {'lag ms':>8} {'p':>7}"]
    for rank, breakdown in sorted(job.rank_breakdowns.items()):
        cells = " ".join(f"{breakdown.percent(c):>10.1f}" for c in Breakdown.CATEGORIES)
        arrival = arrivals.get(rank)
        lag = f"{arrival.median_lag_ms:>8.2f} {arrival.p_value:>7.2g}" if arrival else ""
        overlap = breakdown.percent("comm_overlapped_ms")
        lines.append(f"{rank:>5} {breakdown.total_ms:>9.2f} {cells} {overlap:>9.1f} {lag}")
    lines.append("")
    straggler = "none"
    if job.straggler:
        straggler = (
            f"rank {job.straggler.rank} (+{job.straggler.excess_ms:.1f} ms, "
            f"p {job.straggler.p_value:.2g})"
        )
    bottleneck = job.bottleneck
    if job.bottleneck_reason:
        bottleneck += f" ({job.bottleneck_reason})"
    lines.append(
        f"median step {job.median_step_ms:.2f} ms; bottleneck: {bottleneck}; straggler: {straggler}"
        f"; lateness: {job.lateness_pattern.value}"
    )
    if job.alignment:
        lines.append(
            f"aligned on {job.alignment.matched_collectives} collectives, residual "
            f"median {job.alignment.residual_median_abs_us:.0f} us"
        )
    lines.append("")
    for finding in job.findings[:TOP_FINDINGS]:
        lines.append(
            f"[{finding.severity.value.upper()}] {finding.title} ({finding.id}, "
            f"confidence {finding.confidence:.2f})"
        )
        lines.append(f"    {finding.evidence.text}")
        lines.append(f"    -> {finding.recommendation}")
    if not job.findings:
        lines.append("No findings: nothing stands out.")
    return "\n".join(lines)


def write_outputs(job: JobSummary, sources: list[tuple[int, TraceSource]], out_dir: Path) -> None:
    """summary.json, report.html and merged.trace.json.gz for one job in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SessionArtifact.SUMMARY.value).write_text(job.model_dump_json(indent=2))
    (out_dir / SessionArtifact.REPORT.value).write_text(render_report(job), encoding="utf-8")
    with gzip.open(out_dir / SessionArtifact.MERGED_TRACE.value, "wb", compresslevel=6) as merged:
        written = write_merged_trace(
            [(rank, s.open) for rank, s in sources],
            job.offsets_us,
            merged,
            names={rank: s.name for rank, s in sources},
        )
    for note in written.notes():
        print(f"note: {note}", file=sys.stderr)


def _job_dir_name(summaries: list[RankSummary]) -> str:
    stem = Path(summaries[0].source.rstrip("/")).name.removesuffix(".gz").removesuffix(".json")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem) or "job"


def analyze(
    path: str, out_dir: Path, placement: Path | None = None
) -> list[tuple[Path, JobSummary]]:
    """Summarise every trace under `path` one at a time, merge each job, write its files.

    A folder normally holds one job; when it mixes traces of several (repeated
    ranks, different world sizes), each job gets its own subfolder of `out_dir`.
    """
    sources = find_sources(path, exclude=out_dir)
    summarised, failures = [], []
    for source in sources:
        print(f"summarising {source.name}", file=sys.stderr)
        try:
            summarised.append((source, _summarize(source)))
        except TraceReadError as error:
            # One bad rank must not hide what the others show; say so and go on.
            failures.append(error)
            print(f"note: skipped: {error}", file=sys.stderr)
    if not summarised:
        if len(failures) == 1:
            raise failures[0]
        raise NoReadableTraceError(f"none of the {len(failures)} traces under {path} is readable")
    source_of = {id(summary): source for source, summary in summarised}
    jobs = split_into_jobs([summary for _, summary in summarised])
    where = _placement(placement)
    results = []
    for summaries in jobs:
        job_dir = out_dir if len(jobs) == 1 else out_dir / _job_dir_name(summaries)
        job = merge_ranks(summaries, placement=where)
        if failures:
            skipped = [f"skipped: {error}" for error in failures]
            job = job.model_copy(update={"notes": [*job.notes, *skipped]})
        write_outputs(job, [(s.rank, source_of[id(s)]) for s in summaries], job_dir)
        results.append((job_dir, job))
    return results


def cmd_analyze(args: argparse.Namespace) -> int:
    out_dir = args.out or Path("stepscope-analysis")
    if holds_hang_dumps(args.path):
        return cmd_analyze_hangs(args.path, out_dir)
    try:
        results = analyze(args.path, out_dir, args.placement)
    except (
        MergeError,
        TraceReadError,
        NoReadableTraceError,
        ValueError,
        FileNotFoundError,
    ) as error:
        print(f"stepscope analyze: {error}", file=sys.stderr)
        return 2
    for job_dir, job in results:
        if len(results) > 1:
            print(f"\n=== {job_dir.name}: ranks {[s.rank for s in job.ranks]}")
        print(format_table(job))
        print(f"\nwrote {job_dir}/{{summary.json,report.html,merged.trace.json.gz}}")
    return 0


def add_analyze_command(commands: argparse._SubParsersAction) -> None:
    analyze_cmd = commands.add_parser(
        "analyze", help="analyse per-rank traces: table, summary.json, report.html, merged trace"
    )
    analyze_cmd.add_argument(
        "path",
        help="directory of per-rank traces or of hang dumps (a hang verdict), or s3://bucket/prefix",
    )
    analyze_cmd.add_argument(
        "--out", type=Path, help="output directory (default ./stepscope-analysis)"
    )
    analyze_cmd.add_argument(
        "--placement", type=Path, help='JSON {"<rank>": {"pod": ..., "node": ...}} for slow nodes'
    )
    analyze_cmd.set_defaults(handler=cmd_analyze)
