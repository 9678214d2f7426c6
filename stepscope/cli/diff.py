"""`stepscope diff A B [--out DIR]`: is B slower than A, and what got slower?

A and B are each a session's summary.json (a file, a folder holding one, an ``s3://``
object or an ``https://`` link such as ``stepscope artifacts`` prints) or a folder (or
``s3://`` prefix) of per-rank traces, analysed exactly as ``stepscope analyze`` does. A is
the baseline. The verdict is the one the operator writes into status.baselineComparison
(see stepscope/analysis/comparing/step_comparison.py): per-step job step times of all ranks, block
medians, Mann-Whitney, a bootstrap interval; then the causes, ranked by their share of the
step-time change (stepscope/analysis/comparing/regression.py).

The first line printed is always ``verdict: no significant change``, ``verdict: slower by
X% (...)`` or ``verdict: faster by X% (...)`` (``verdict: inconclusive (...)`` when a side
has too few steps), then the causes table. DIR gets diff.json and report.html (B's report,
with the comparison first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import urllib.request
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.cli.analyze import analyze
from stepscope.cli.inputs import INPUT_ERROR_EXIT, check_input, os_error_message, reading_s3
from stepscope.storage import SessionArtifact

if TYPE_CHECKING:
    from stepscope.analysis.comparing.step_comparison import Cause, Comparison

DEFAULT_THRESHOLD_PCT = 5.0
# A summary.json is a few hundred KB at most; refuse anything far larger before parsing it.
MAX_SUMMARY_BYTES = 64 * 1024 * 1024
SUMMARY = SessionArtifact.SUMMARY.value


class DiffInputError(ValueError):
    """An input is neither a summary.json nor a folder of traces; the message says which."""


def _read_url(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read(MAX_SUMMARY_BYTES + 1)
    if len(body) > MAX_SUMMARY_BYTES:
        raise DiffInputError(f"{url}: larger than {MAX_SUMMARY_BYTES} bytes; not a summary.json")
    return body


def _read_s3(uri: str) -> bytes:
    try:
        import boto3  # Lazily: boto3 ships with the operator and agent extras.
    except ImportError as error:
        raise RuntimeError(
            "reading s3:// needs boto3: pip install 'stepscope[operator]'"
        ) from error

    from stepscope.analysis.reading.trace_sources import (
        DEFAULT_S3_REGION,
        S3_ENDPOINT_ENV,
        S3_REGION_ENV,
    )

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    client = boto3.client(
        "s3",
        endpoint_url=os.environ.get(S3_ENDPOINT_ENV) or None,
        region_name=os.environ.get(S3_REGION_ENV, DEFAULT_S3_REGION),
    )
    return client.get_object(Bucket=bucket, Key=key)["Body"].read(MAX_SUMMARY_BYTES)


def _parse(raw: bytes, where: str) -> JobSummary:
    try:
        return JobSummary.model_validate_json(raw)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(document)"
        raise DiffInputError(
            f"{where} is not a stepscope summary.json ({field}: {first['msg']}); pass a "
            "session's summary.json or a folder of per-rank traces"
        ) from error


def load_job(spec: str, work_dir: Path) -> JobSummary:
    """A job summary from a summary.json (path, folder, s3:// or https://) or from traces,
    which are analysed into `work_dir` as `stepscope analyze` would."""
    if spec.startswith(("https://", "http://")):
        return _parse(_read_url(spec), spec)
    if spec.startswith("s3://") and spec.endswith(".json") and spec.rsplit("/", 1)[-1] == SUMMARY:
        with reading_s3(spec):
            return _parse(_read_s3(spec), spec)
    path = Path(spec)
    if not spec.startswith("s3://"):
        if path.is_file() and path.name == SUMMARY:
            return _parse(path.read_bytes(), spec)
        if (path / SUMMARY).is_file():
            return _parse((path / SUMMARY).read_bytes(), str(path / SUMMARY))
        if not path.exists():
            raise DiffInputError(f"{spec}: no such file or folder")
    with reading_s3(spec):
        results = analyze(spec, work_dir)
    if len(results) != 1:
        raise DiffInputError(
            f"{spec} holds traces of {len(results)} jobs; diff one job's folder "
            f"(stepscope analyze {spec} shows them)"
        )
    return results[0][1]


def verdict_line(comparison: Comparison) -> str:
    from stepscope.analysis.comparing.regression import verdict_phrase

    return "verdict: " + verdict_phrase(comparison)


def _cell(cause: Cause) -> list[str]:
    before = ("≤" if cause.before_is_bound else "") + f"{cause.before_ms:.2f}"
    share = f"{cause.share_pct:.0f}" if cause.share_pct is not None else "-"
    return [
        cause.kind,
        cause.name[:48],
        before,
        f"{cause.after_ms:.2f}",
        f"{cause.delta_ms:+.2f}",
        f"{cause.pct_of_step:+.1f}",
        share,
    ]


HEADER = ["kind", "name", "before ms", "after ms", "delta ms", "% of step", "share %"]


def _table(causes: list[Cause]) -> str:
    rows = [HEADER, *(_cell(c) for c in causes)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = []
    for row in rows:
        # Kind and name read left-aligned, the numbers right-aligned.
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def format_diff(comparison: Comparison) -> str:
    """The console view: the verdict line, the causes (largest first), the breakdown."""
    lines = [verdict_line(comparison)]
    explanation = comparison.explanation
    if explanation is None:
        return "\n".join(lines)
    lines.append(
        f"per step: {explanation.before_step_ms:.2f} ms -> {explanation.after_step_ms:.2f} ms "
        f"(breakdown, mean over ranks); blocks of {comparison.block_steps} step(s)"
    )
    lines += ["", "causes, largest first:"]
    lines.append(_table(explanation.causes) if explanation.causes else "  none above 1% of a step")
    lines += ["", "breakdown:", _table(explanation.categories)]
    return "\n".join(lines)


def diff_section(comparison: Comparison, a: str, b: str) -> str:
    """The comparison as an HTML section for the top of B's report."""
    rows = ""
    for cause in comparison.explanation.causes if comparison.explanation else []:
        rows += "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in _cell(cause)) + "</tr>"
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADER)
    table = f"<table><tr>{head}</tr>{rows}</table>" if rows else "<p>No cause above 1%.</p>"
    return (
        f"<h2>Against {escape(a)}</h2><p><strong>{escape(verdict_line(comparison))}</strong></p>"
        f'<p class="muted">baseline {escape(a)}; this run {escape(b)}</p>{table}'
    )


def run_diff(a: str, b: str, out_dir: Path, threshold_pct: float) -> Comparison:
    # numpy and scipy are imported only here: `stepscope analyze` (and the sidecar, which
    # imports the CLI's modules under a tight address-space limit) never needs them.
    from stepscope.analysis.comparing.regression import compare_jobs

    # Both inputs are checked before either is analysed, which can take minutes.
    for spec in (a, b):
        check_input(spec, ACCEPTED)
    out_dir.mkdir(parents=True, exist_ok=True)
    before = load_job(a, out_dir / "a")
    after = load_job(b, out_dir / "b")
    comparison = compare_jobs(("B", after), [("A", before)], threshold_pct, 1)
    comparison = comparison.model_copy(update={"current_session": b, "baseline_sessions": [a]})
    document = {"a": a, "b": b, "verdict_line": verdict_line(comparison), **comparison.model_dump()}
    (out_dir / "diff.json").write_text(json.dumps(document, indent=2))
    from stepscope.analysis.reports.html import render_report

    report = render_report(after, extra_section=diff_section(comparison, a, b))
    (out_dir / SessionArtifact.REPORT.value).write_text(report, encoding="utf-8")
    return comparison


def cmd_diff(args: argparse.Namespace) -> int:
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="stepscope-diff-"))
    try:
        comparison = run_diff(args.a, args.b, out_dir, args.threshold_pct)
    except (DiffInputError, ValueError, RuntimeError) as error:
        print(f"stepscope diff: {error}", file=sys.stderr)
        return INPUT_ERROR_EXIT
    except OSError as error:
        print(f"stepscope diff: {os_error_message(error)}", file=sys.stderr)
        return INPUT_ERROR_EXIT
    print(format_diff(comparison))
    print(f"\nwrote {out_dir}/{{diff.json,report.html}}")
    return 0


ACCEPTED = (
    "a summary.json (or a folder holding one), a folder of per-rank traces, an s3:// URI "
    "of either, or an https:// link to a summary.json"
)
DESCRIPTION = """\
Is B slower than A, and what got slower? A is the baseline. Each of A and B is a
session's summary.json (a file, a folder holding one, s3://.../summary.json or an
https:// link such as `stepscope artifacts` prints) or a folder (or s3:// prefix) of
per-rank traces, analysed as `stepscope analyze` does. Both are checked before either
is analysed; s3:// reads the environment `stepscope analyze --help` describes.

The first line printed is the verdict: no significant change, slower by X% or faster
by X% (inconclusive when a side has too few steps); then the causes, largest first.
--out gets diff.json and report.html (B's report, with the comparison first)."""
EXAMPLES = """\
examples:
  stepscope diff ./run-a ./run-b                        # two folders of per-rank traces
  stepscope diff before/summary.json after/ --out ./diff
  stepscope diff s3://traces/team/job/uid-a/summary.json s3://traces/team/job/uid-b/
  stepscope diff a/summary.json b/summary.json --threshold-pct 2"""


def add_diff_command(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "diff",
        help="compare two sessions or trace folders: verdict, then what changed",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("a", help="baseline: summary.json (path, s3://, https://) or traces")
    command.add_argument("b", help="the run to judge against A, in the same forms")
    command.add_argument(
        "--out", type=Path, help="folder for diff.json and report.html (default: a temp folder)"
    )
    command.add_argument(
        "--threshold-pct",
        type=float,
        default=DEFAULT_THRESHOLD_PCT,
        help="smallest change of the median step time that counts (default 5)",
    )
    command.set_defaults(handler=cmd_diff)
