"""`stepscope analyze` end to end on a real scenario folder, as a user runs it."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from stepscope.analysis.model.job_summary import JobSummary

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def test_analyze_writes_summary_report_and_merged_trace(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "stepscope.cli",
            "analyze",
            str(SCENARIOS / "straggler"),
            "--out",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "straggler: rank 2" in result.stdout
    assert "[HIGH]" in result.stdout or "[MEDIUM]" in result.stdout

    summary = JobSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.world_size == 4 and summary.straggler.rank == 2
    assert [s.rank for s in summary.ranks] == [0, 1, 2, 3]

    report = (out / "report.html").read_text()
    assert report.count("<svg") >= 2
    external = report.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in report and "http://" not in external and "https://" not in external

    with gzip.open(out / "merged.trace.json.gz", "rt") as merged:
        trace = json.load(merged)
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    assert names == {r: f"rank {r}" for r in range(4)}
    process_names = [e for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert len(process_names) == 4
    # Perfetto's JSON importer wants integer process and thread ids.
    assert all(
        isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in trace["traceEvents"]
    )


def test_analyze_without_traces_fails_with_a_clear_message(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "stepscope.cli", "analyze", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no trace files" in result.stderr


def test_analyze_splits_a_folder_of_unrelated_traces_into_jobs(tmp_path, shared_traces):
    from stepscope.cli.analyze import analyze

    results = analyze(str(shared_traces), tmp_path)
    jobs = {job_dir.name: [s.rank for s in job.ranks] for job_dir, job in results}
    # The two sampled ranks are one 128-rank job; every other file is its own job.
    assert jobs["sampled-128rank-rank0"] == [0, 1]
    assert jobs["gloo-300rank-rank34"] == [34]
    assert len(jobs) == 6
    for job_dir, _job in results:
        assert {p.name for p in job_dir.iterdir()} == {
            "summary.json",
            "report.html",
            "merged.trace.json.gz",
        }
    sampled = {d.name: j for d, j in results}["sampled-128rank-rank0"]
    assert sampled.alignment is not None and sampled.alignment.matched_collectives == 10
    assert any("2 of 128 ranks" in note for note in sampled.notes)


def test_analyze_skips_a_truncated_trace_with_a_note(tmp_path):
    good = (SCENARIOS / "balanced" / "rank-0.json.gz").read_bytes()
    (tmp_path / "rank-0.json.gz").write_bytes(good)
    (tmp_path / "rank-1.json.gz").write_bytes(good[: len(good) // 2])
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "stepscope.cli", "analyze", str(tmp_path), "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "note: skipped: trace" in result.stderr
    assert "rank-1.json.gz is truncated" in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [rank["rank"] for rank in summary["ranks"]] == [0]
    assert any("rank-1.json.gz is truncated" in note for note in summary["notes"])


def test_analyze_fails_when_no_trace_is_readable(tmp_path):
    good = (SCENARIOS / "balanced" / "rank-0.json.gz").read_bytes()
    (tmp_path / "rank-0.json.gz").write_bytes(good[: len(good) // 2])
    (tmp_path / "rank-1.json.gz").write_bytes(b"")
    result = subprocess.run(
        [sys.executable, "-m", "stepscope.cli", "analyze", str(tmp_path), "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "none of the 2 traces" in result.stderr and "Traceback" not in result.stderr
