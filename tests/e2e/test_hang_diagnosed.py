"""A 4-rank DDP PyTorchJob where rank 2 blocks in its data loading: a hang-check session
sees no step for longer than its threshold, dumps every rank through the agents, and names
rank 2, its pod, the all-reduce it never entered and the line it is stuck on. The raw dumps
and the report are stored with the session's artifacts, and `stepscope analyze` on the
stored dumps reaches the same verdict."""

from __future__ import annotations

import json

import pytest
from e2e_helpers import E2E_DIR, apply, pytorchjob, running_pods
from support import wait_until
from support.operator_helpers import get_session, session_events, session_phase

from stepscope.cli.main import main as stepscope_main

pytestmark = pytest.mark.e2e

BLOCK_AT_STEP = 30
BLOCKING_LINE = next(
    number
    for number, line in enumerate((E2E_DIR / "ddp_job.py").read_text().splitlines(), 1)
    if "the blocking line" in line
)
STUCK_AT = f"ddp_job.py:{BLOCKING_LINE} in load_batch"


def hang_check(namespace: str, name: str, job: str) -> dict:
    return {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"pytorchJob": job},
            "mode": "hang-check",
            # The floor is far above a healthy step on a loaded machine (tens of ms to a
            # second), and the watch bounds the test: past it the session ends NoHang.
            "hangCheck": {"thresholdFloorSeconds": 15, "stepTimeMultiplier": 10,
                          "watchSeconds": 400, "dumpTimeoutSeconds": 20},
        },
    }  # fmt: skip


def test_blocked_rank_is_named_with_pod_collective_and_line(
    e2e_platform, namespace, operator_process, tmp_path, capsys
):
    cluster = e2e_platform.cluster
    args = ["--steps", "100000", "--step-sleep", "0.05", "--block-rank", "2"]
    args += ["--block-at-step", str(BLOCK_AT_STEP)]
    apply(cluster, pytorchjob(e2e_platform, namespace, "hung", workers=3, args=args))
    wait_until(running_pods(cluster, namespace, "hung"), 180, "4 running pods")
    apply(cluster, hang_check(namespace, "hung-check", "hung"))
    wait_until(
        lambda: (
            session_phase(cluster, namespace, "hung-check") in ("Diagnosed", "Succeeded", "Failed")
        ),
        420,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "hung-check")["status"]
    assert status["phase"] == "Diagnosed", json.dumps(status, indent=1)
    hang = status["hang"]
    assert hang["kind"] == "missing-rank" and hang["collective"] == "all_reduce", hang
    # Rank 2 is worker index 1 under the training operator's numbering.
    named = hang["ranks"][0]
    assert (named["rank"], named["pod"]) == (2, "hung-worker-1"), hang
    assert named["node"] and named["stuckAt"] == STUCK_AT, hang
    assert hang["message"].startswith(
        f"Hang: rank 2 (pod hung-worker-1, node {named['node']}) never entered all_reduce "
        f"#{hang['sequenceId']} (pg {hang['processGroup']}); stuck at {STUCK_AT}"
    ), hang
    # The other ranks wait inside the all-reduce, called from the script's backward.
    assert hang["others"].startswith("ranks 0-1, 3 wait in all_reduce"), hang
    # Past the threshold when judged; the status rounds to 0.1 s, so 15.04 s reads 15.0.
    assert hang["stalledSeconds"] >= hang["thresholdSeconds"] >= 15
    assert hang["lastStep"] == BLOCK_AT_STEP
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "HangDiagnosed" and ready["message"].startswith("Hang: rank 2")
    events = session_events(cluster, namespace, "hung-check")
    assert any(e["reason"] == "Diagnosed" and e["type"] == "Warning" for e in events), events

    s3 = cluster.s3_client()
    prefix = status["artifacts"]["uri"].split("/", 3)[3]
    keys = {
        o["Key"][len(prefix) :]
        for o in s3.list_objects_v2(Bucket=cluster.s3_bucket, Prefix=prefix)["Contents"]
    }
    assert {f"rank-{r}/hang-dump.json" for r in range(4)} | {"hang-report.txt"} <= keys, keys
    report = s3.get_object(Bucket=cluster.s3_bucket, Key=prefix + "hang-report.txt")
    assert report["Body"].read().decode().startswith(hang["message"])

    # The stored full dumps, analysed offline, give the verdict the status holds.
    for rank in range(4):
        body = s3.get_object(Bucket=cluster.s3_bucket, Key=f"{prefix}rank-{rank}/hang-dump.json")
        (tmp_path / f"rank-{rank}").mkdir()
        (tmp_path / f"rank-{rank}" / "hang-dump.json").write_bytes(body["Body"].read())
    capsys.readouterr()
    assert stepscope_main(["analyze", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == hang["message"]

    described = cluster.kubectl("describe", "profilesession", "hung-check", "-n", namespace).stdout
    assert "Diagnosed" in described and "never entered all_reduce" in described
    with capsys.disabled():
        print(described)  # the README's example, kept in the test log
