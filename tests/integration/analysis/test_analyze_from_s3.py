"""`stepscope analyze s3://...` reads per-rank traces straight from the real S3 server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.storage import RankArtifact, rank_key, session_prefix

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
pytestmark = pytest.mark.integration


def test_analyze_reads_the_session_layout_from_s3(local_cluster, tmp_path):
    prefix = session_prefix("traces", "default", "straggler-job", "uid-1")
    client = local_cluster.s3_client()
    for rank in range(4):
        client.upload_file(
            str(SCENARIOS / "straggler" / f"rank-{rank}.json.gz"),
            local_cluster.s3_bucket,
            rank_key(prefix, rank, RankArtifact.TRACE),
        )
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "stepscope.cli",
            "analyze",
            f"s3://{local_cluster.s3_bucket}/{prefix}",
            "--out",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **local_cluster.env()},
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    assert summary["straggler"]["rank"] == 2
    assert summary["ranks"][0]["source"].startswith("s3://")
    assert (out / "merged.trace.json.gz").stat().st_size > 0
