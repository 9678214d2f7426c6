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

from stepscope.analysis.findings.memory_advice import composition_sentence
from stepscope.analysis.merging.merge import MergeError, merge_ranks, split_into_jobs
from stepscope.analysis.model.fabric import MAX_RANKS_PER_NODE, FabricOptions, parse_link_peaks
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import Breakdown, RankSummary
from stepscope.analysis.rank.summary import summarize_rank
from stepscope.analysis.reading.reader import TraceReadError
from stepscope.analysis.reading.trace_sources import (
    DEFAULT_S3_REGION,
    S3_ENDPOINT_ENV,
    S3_REGION_ENV,
    TraceSource,
    find_sources,
)
from stepscope.analysis.reports.html import render_report
from stepscope.analysis.reports.merged_trace import write_merged_trace
from stepscope.cli.inputs import (
    CREDENTIAL_ENVS,
    INPUT_ERROR_EXIT,
    InputError,
    check_input,
    os_error_message,
    reading_s3,
)
from stepscope.hang.offline import cmd_analyze_hangs, holds_hang_dumps
from stepscope.storage import SessionArtifact

TOP_FINDINGS = 5
# Past this many ranks the console leaves the per-rank rows out unless --ranks asks for them.
MAX_RANK_ROWS = 16


class NoReadableTraceError(Exception):
    """Every trace found failed to read; each was named in a note as it was skipped."""


def _summarize(source: TraceSource) -> RankSummary:
    """Summarise one source, streamed straight from its file or S3 object."""
    summary = summarize_rank(source.name, rank=source.rank_hint, opener=source.open)
    return summary.model_copy(update={"source": source.name})


def _placement(path: Path | None) -> dict[int, tuple[str, str]] | None:
    if path is None:
        return None
    expected = '{"<rank>": {"pod": ..., "node": ...}}'
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        reason = (getattr(error, "strerror", None) or str(error)).lower()
        raise ValueError(f"--placement {path}: {reason}; pass a JSON file {expected}") from error
    try:
        return {int(rank): (where.get("pod", ""), where["node"]) for rank, where in raw.items()}
    except (KeyError, AttributeError, ValueError) as error:
        raise ValueError(f"--placement {path}: expected {expected}") from error


def fabric_options(ranks_per_node: int | None, link_peak: str | None) -> FabricOptions:
    """--ranks-per-node and --link-peak as one `FabricOptions`; ValueError naming the flag."""
    if ranks_per_node is not None and not 1 <= ranks_per_node <= MAX_RANKS_PER_NODE:
        raise ValueError(
            f"--ranks-per-node {ranks_per_node}: pass the number of ranks on each node, "
            f"1 to {MAX_RANKS_PER_NODE} (e.g. 8 for eight GPUs per node)"
        )
    intra, inter = parse_link_peaks(link_peak) if link_peak is not None else (None, None)
    return FabricOptions(
        ranks_per_node=ranks_per_node, intra_peak_gbps=intra, inter_peak_gbps=inter
    )


# Op and kernel names on the console: templated kernel names run to hundreds of characters.
CONSOLE_NAME_CHARS = 80


def verdict_lines(job: JobSummary) -> list[str]:
    """The verdict (bottleneck, straggler, median step, lateness) and how well ranks aligned."""
    straggler = "none"
    if job.straggler:
        straggler = (
            f"rank {job.straggler.rank} (+{job.straggler.excess_ms:.1f} ms, "
            f"p {job.straggler.p_value:.2g})"
        )
    bottleneck = job.bottleneck
    if job.bottleneck_reason:
        bottleneck += f" ({job.bottleneck_reason})"
    mfu = ""
    if job.efficiency is not None and job.efficiency.median_mfu_pct is not None:
        mfu = f"; MFU {job.efficiency.median_mfu_pct:.1f}%"
    lines = [
        f"verdict: bottleneck: {bottleneck}; straggler: {straggler}; median step "
        f"{job.median_step_ms:.2f} ms{mfu}; lateness: {job.lateness_pattern.value}"
    ]
    if job.alignment:
        lines.append(
            f"aligned on {job.alignment.matched_collectives} collectives, residual "
            f"median {job.alignment.residual_median_abs_us:.0f} us"
        )
    lines.extend(memory_lines(job))
    lines.extend(critical_path_lines(job))
    return lines


def critical_path_lines(job: JobSummary) -> list[str]:
    """The typical step's critical path: the rank on it, its work and its longest op."""
    typical = job.critical_path.typical if job.critical_path is not None else None
    if typical is None:
        return []
    path = typical.path
    if typical.chosen_by == "spliced":
        collectives = sum(piece.collective is not None for piece in typical.pieces)
        ranks = ", ".join(map(str, typical.ranks))
        who = f"ranks {ranks} (spliced at {collectives} collectives)"
    else:
        why = "arrived last" if typical.chosen_by == "arrived_last" else "longest step"
        who = f"rank {typical.rank} ({why})"
    work = path.length_ms or 1.0
    line = (
        f"critical path: step {path.step}, {who}: {path.length_ms:.1f} ms "
        f"of work in a {path.step_ms:.1f} ms step ({100 * path.cpu_ms / work:.0f}% CPU, "
        f"{100 * path.gpu_ms / work:.0f}% GPU, "
        f"{100 * (path.launch_ms + path.kernel_gap_ms) / work:.0f}% launch); "
        f"{path.between_ops_ms:.1f} ms between host ops, {path.sync_wait_ms:.1f} ms sync wait"
    )
    if path.segments:
        top = path.segments[0]
        line += f"; longest: {top.kind} {top.name[:CONSOLE_NAME_CHARS]} {top.ms:.1f} ms"
    return [line]


def memory_lines(job: JobSummary) -> list[str]:
    """The largest allocated peak and what it is made of, when a trace said so."""
    composed = [(s.rank, s.memory.composition) for s in job.ranks if s.memory.composition]
    if not composed:
        return []
    rank, composition = max(composed, key=lambda row: (row[1].peak_bytes, -row[0]))
    return [f"memory: rank {rank}: {composition_sentence(composition)}"]


def finding_lines(job: JobSummary) -> list[str]:
    """The top findings, each with its evidence and recommendation."""
    lines = []
    for finding in job.findings[:TOP_FINDINGS]:
        lines.append(
            f"[{finding.severity.value.upper()}] {finding.title} ({finding.id}, "
            f"confidence {finding.confidence:.2f})"
        )
        lines.append(f"    {finding.evidence.text}")
        lines.append(f"    -> {finding.recommendation}")
    if not job.findings:
        lines.append("No findings: nothing stands out.")
    return lines


def rank_lines(job: JobSummary) -> list[str]:
    """One row per rank: its step time, breakdown, overlap and arrival lag."""
    arrivals = {a.rank: a for a in job.arrivals}
    labels = [c.removesuffix("_ms").replace("comm_exposed", "comm") for c in Breakdown.CATEGORIES]
    header = f"{'rank':>5} {'step ms':>9} " + " ".join(f"{x[:9] + '%':>10}" for x in labels)
    # MFU gets a column only when some rank measured it (the full tier on a known GPU).
    mfu = _mfu_by_rank(job)
    mfu_header = f" {'MFU%':>6}" if mfu else ""
    lines = [header + f"{mfu_header} {'overlap%':>9} {'lag ms':>8} {'p':>7}"]
    for rank, breakdown in sorted(job.rank_breakdowns.items()):
        cells = " ".join(f"{breakdown.percent(c):>10.1f}" for c in Breakdown.CATEGORIES)
        if mfu:
            value = mfu.get(rank)
            cells += f" {value:>6.1f}" if value is not None else f" {'-':>6}"
        arrival = arrivals.get(rank)
        lag = f"{arrival.median_lag_ms:>8.2f} {arrival.p_value:>7.2g}" if arrival else ""
        overlap = breakdown.percent("comm_overlapped_ms")
        lines.append(f"{rank:>5} {breakdown.total_ms:>9.2f} {cells} {overlap:>9.1f} {lag}")
    return lines


def _mfu_by_rank(job: JobSummary) -> dict[int, float | None]:
    if job.efficiency is None or job.efficiency.median_mfu_pct is None:
        return {}
    return {row.rank: row.median_mfu_pct for row in job.efficiency.utilization}


def format_table(job: JobSummary, all_ranks: bool = False) -> str:
    """The console view: the verdict first, then the top findings, then the rank rows.

    The rows are printed for at most `MAX_RANK_ROWS` ranks unless `all_ranks`; past that,
    one line says how many were left out, so at 1024 ranks the verdict stays on screen.
    """
    lines = [*verdict_lines(job), "", *finding_lines(job), ""]
    ranks = len(job.rank_breakdowns)
    if all_ranks or ranks <= MAX_RANK_ROWS:
        lines += rank_lines(job)
    else:
        lines.append(
            f"{ranks} rank rows left out (more than {MAX_RANK_ROWS} ranks); --ranks prints "
            "them, summary.json holds every rank"
        )
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
    path: str,
    out_dir: Path,
    placement: Path | None = None,
    fabric: FabricOptions | None = None,
) -> list[tuple[Path, JobSummary]]:
    """Summarise every trace under `path` one at a time, merge each job, write its files.

    A folder normally holds one job; when it mixes traces of several (repeated
    ranks, different world sizes), each job gets its own subfolder of `out_dir`.
    """
    # The placement is read first: a typo in it must not cost the summaries of every rank.
    where = _placement(placement)
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
    results = []
    for summaries in jobs:
        job_dir = out_dir if len(jobs) == 1 else out_dir / _job_dir_name(summaries)
        job = merge_ranks(summaries, placement=where, fabric=fabric)
        if failures:
            skipped = [f"skipped: {error}" for error in failures]
            job = job.model_copy(update={"notes": [*job.notes, *skipped]})
        write_outputs(job, [(s.rank, source_of[id(s)]) for s in summaries], job_dir)
        results.append((job_dir, job))
    return results


ACCEPTED = "a folder of per-rank traces, one trace file, or s3://BUCKET/PREFIX"
DESCRIPTION = f"""\
Summarise per-rank PyTorch profiler traces, merge them into one job and print the
verdict first: bottleneck, straggler, median step, then the top findings. Writes
summary.json, report.html and merged.trace.json.gz into --out. A folder of hang dumps
gets the hang verdict instead.

A trace's rank comes from rank<N> in its path (rank-3/trace.json.gz, worker_rank3.json.gz,
rank_12.pt.trace.json), else from the trace itself. The per-rank rows are printed for at
most {MAX_RANK_ROWS} ranks; pass --ranks to print them for more.

s3:// inputs are read with boto3, configured by the environment:
  {CREDENTIAL_ENVS}
      the credentials (or AWS_PROFILE, or any other source boto3 reads)
  {S3_ENDPOINT_ENV}
      URL of an S3-compatible server such as MinIO (unset: AWS S3)
  {S3_REGION_ENV}
      the bucket's region (default {DEFAULT_S3_REGION})"""
EXAMPLES = """\
examples:
  stepscope analyze ./traces                        # rank-0.json.gz, rank-1.json.gz, ...
  stepscope analyze ./traces --out ./report --ranks # every rank's row, however many
  stepscope analyze ./hang-dumps                    # why a job hangs
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... STEPSCOPE_S3_ENDPOINT=https://minio:9000 \\
    stepscope analyze s3://traces/default/llama-ft/uid/"""


def cmd_analyze(args: argparse.Namespace) -> int:
    out_dir = args.out or Path("stepscope-analysis")
    try:
        check_input(args.path, ACCEPTED)
        if out_dir.exists() and not out_dir.is_dir():
            raise InputError(f"--out {out_dir}: is a file; pass a folder for the outputs")
        if holds_hang_dumps(args.path):
            return cmd_analyze_hangs(args.path, out_dir)
        fabric = fabric_options(args.ranks_per_node, args.link_peak)
        with reading_s3(args.path):
            results = analyze(args.path, out_dir, args.placement, fabric)
    except (
        MergeError,
        TraceReadError,
        NoReadableTraceError,
        ValueError,
        RuntimeError,
    ) as error:
        print(f"stepscope analyze: {error}", file=sys.stderr)
        return INPUT_ERROR_EXIT
    except OSError as error:
        print(f"stepscope analyze: {os_error_message(error)}", file=sys.stderr)
        return INPUT_ERROR_EXIT
    for job_dir, job in results:
        if len(results) > 1:
            ranks = [s.rank for s in job.ranks]
            listed = f": ranks {ranks}" if len(ranks) <= MAX_RANK_ROWS else ""
            print(f"\n=== {job_dir.name}, {len(ranks)} ranks{listed}")
        print(format_table(job, all_ranks=args.ranks))
        print(f"\nwrote {job_dir}/{{summary.json,report.html,merged.trace.json.gz}}")
    return 0


def add_analyze_command(commands: argparse._SubParsersAction) -> None:
    analyze_cmd = commands.add_parser(
        "analyze",
        help="analyse per-rank traces: verdict, summary.json, report.html, merged trace",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    analyze_cmd.add_argument(
        "path",
        help="folder of per-rank traces or of hang dumps (a hang verdict), one trace file, "
        "or s3://bucket/prefix",
    )
    analyze_cmd.add_argument(
        "--out", type=Path, help="output directory (default ./stepscope-analysis)"
    )
    analyze_cmd.add_argument(
        "--placement", type=Path, help='JSON {"<rank>": {"pod": ..., "node": ...}} for slow nodes'
    )
    analyze_cmd.add_argument(
        "--ranks-per-node",
        type=int,
        metavar="N",
        help="ranks on each node, numbered node by node: tells intra- from inter-node "
        "process groups when --placement does not (default: the GPUs each trace's host lists)",
    )
    analyze_cmd.add_argument(
        "--link-peak",
        metavar="intra=GBPS,inter=GBPS",
        help="the links' peak bandwidth per GPU each way, in GB/s, instead of the table's "
        "figure for the GPU model (e.g. intra=300,inter=50)",
    )
    analyze_cmd.add_argument(
        "--ranks",
        action="store_true",
        help=f"print every rank's row (by default only for at most {MAX_RANK_ROWS} ranks)",
    )
    analyze_cmd.set_defaults(handler=cmd_analyze)
