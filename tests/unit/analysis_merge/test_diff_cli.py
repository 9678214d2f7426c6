"""`stepscope diff` end to end on real 4-rank DDP trace folders, as a user runs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
VERDICT = re.compile(r"^verdict: (no significant change|slower by [\d.]+%|faster by [\d.]+%) \(")


def _diff(a: Path | str, b: Path | str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stepscope.cli", "diff", str(a), str(b), "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_diff_of_balanced_and_communication_bound_names_communication(tmp_path):
    out = tmp_path / "out"
    result = _diff(SCENARIOS / "balanced", SCENARIOS / "communication_bound", out)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert VERDICT.match(lines[0]), lines[0]
    causes = lines[lines.index("causes, largest first:") + 2]
    assert causes.split()[:3] == ["category", "exposed", "communication"], causes

    document = json.loads((out / "diff.json").read_text())
    assert document["verdict_line"] == lines[0]
    first = document["explanation"]["causes"][0]
    assert first["name"] == "exposed communication" and first["delta_ms"] > 0
    assert document["baseline_sessions"] == [str(SCENARIOS / "balanced")]
    report = (out / "report.html").read_text()
    assert "Against" in report and "exposed communication" in report
    # The trace folders were analysed as `stepscope analyze` does, next to the diff.
    assert (out / "a" / "summary.json").is_file() and (out / "b" / "summary.json").is_file()

    # The written summaries diff the same as the traces they came from.
    again = _diff(out / "a" / "summary.json", out / "b", tmp_path / "again")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == lines[0]


def test_diff_of_two_identical_folders_is_no_significant_change(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(SCENARIOS / "balanced", copy)
    result = _diff(SCENARIOS / "balanced", copy, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("verdict: no significant change (+0.0%")
    assert "none above 1% of a step" in result.stdout


def test_diff_refuses_a_file_that_is_not_a_summary(tmp_path):
    bogus = tmp_path / "summary.json"
    bogus.write_text(json.dumps({"ranks": "nope"}))
    result = _diff(bogus, bogus, tmp_path / "out")
    assert result.returncode == 2
    assert "is not a stepscope summary.json" in result.stderr and "ranks" in result.stderr
