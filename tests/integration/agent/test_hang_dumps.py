"""Hang dumps through the real hook: 4 gloo ranks in 2 pods, one made to hang, dumped by
the sidecars while the training threads are blocked, attributed, and analysed again
offline from the stored files with the same verdict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import free_port
from support.launched import MARK_ENV, kill_marked, new_mark

from stepscope.api.hang_dump import HANG_DUMPS_PATH, PodHangDumps
from stepscope.api.hang_status import HangKind
from stepscope.cli.main import main as stepscope_main
from stepscope.hang.attribution import attribute_hang

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
HOOK_DIR = REPO / "agent_image" / "hook"
TRAINER = Path(__file__).with_name("hang_trainer.py")
FAULT_RANK, FAULT_STEP = 2, 4
BLOCKING_LINE = next(
    number
    for number, line in enumerate(TRAINER.read_text().splitlines(), 1)
    if "the blocking line" in line
)


def launch(tmp_path: Path, pods, fault: str, mark: str, *extra: str) -> list[subprocess.Popen]:
    """Two torchrun agents of two ranks each (ranks 0-1 in the first pod, 2-3 in the second),
    every process marked `mark` for `stop`."""
    port = free_port()
    processes = []
    for node_rank, sidecar in enumerate(pods):
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
        env.update(
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(HOOK_DIR),
            STEPSCOPE_AGENT_DIR=str(sidecar.agent_dir),
            **{MARK_ENV: mark},
        )
        log = (tmp_path / f"trainer-{fault}-{node_rank}.log").open("ab")
        processes.append(
            subprocess.Popen(
                [
                    sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(pods)}",
                    "--nproc-per-node=2", f"--node-rank={node_rank}", "--master-addr=127.0.0.1",
                    f"--master-port={port}", str(TRAINER), "--fault", fault,
                    "--fault-rank", str(FAULT_RANK), "--fault-step", str(FAULT_STEP), *extra,
                ],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        )  # fmt: skip
    return processes


def stop(processes: list[subprocess.Popen], mark: str) -> None:
    """Kill the torchrun agents and their workers (which run in sessions of their own)."""
    kill_marked(mark)
    for process in processes:
        process.wait(30)


def wait_until_stuck(pods, processes, timeout: float = 300) -> None:
    """Until all 4 ranks reached the fault step and none moved for ten polls. (A rank a
    mismatch does not hold up may pass it and stop one collective later.)"""
    deadline = time.monotonic() + timeout
    unchanged, last = 0, None
    while time.monotonic() < deadline:
        steps = [r["globalStep"] for pod in pods for r in pod.status()["ranks"]]
        stopped = len(steps) == 4 and all(FAULT_STEP <= s <= FAULT_STEP + 1 for s in steps)
        unchanged = unchanged + 1 if stopped and steps == last else 0
        if unchanged >= 10:
            return
        last = steps
        assert all(p.poll() is None for p in processes), "a trainer exited instead of hanging"
        time.sleep(0.5)
    raise TimeoutError(f"ranks never stopped at step {FAULT_STEP}: {last}")


def dump_pods(pods, timeout_seconds: float = 20) -> list[PodHangDumps]:
    answers = []
    for pod in pods:
        code, body = pod.call(
            "POST", HANG_DUMPS_PATH, {"requestId": "hang-1", "timeoutSeconds": timeout_seconds}
        )
        assert code == 200, body
        answers.append(PodHangDumps.model_validate(body))
    return answers


@pytest.fixture
def two_pods(start_storageless_sidecar):
    return [start_storageless_sidecar("job-worker-0"), start_storageless_sidecar("job-worker-1")]


def diagnose(tmp_path, pods, fault, *extra):
    mark = new_mark()
    processes = launch(tmp_path, pods, fault, mark, *extra)
    try:
        wait_until_stuck(pods, processes)
        answers = dump_pods(pods)
    finally:
        stop(processes, mark)
    dumps = [rank for answer in answers for rank in answer.ranks]
    return answers, dumps, attribute_hang(dumps)


def offline_verdict(tmp_path, answers, capsys) -> str:
    folder = tmp_path / f"dumps-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    for answer in answers:
        (folder / f"{answer.pod}.json").write_text(json.dumps(answer.to_wire()))
    assert stepscope_main(["analyze", str(folder), "--out", str(folder / "out")]) == 0
    return capsys.readouterr().out.splitlines()[0]


def test_a_blocked_rank_is_named_with_its_line(tmp_path, two_pods, capsys):
    answers, dumps, verdict = diagnose(tmp_path, two_pods, "block")
    assert verdict.kind == HangKind.MISSING_RANK, verdict
    assert verdict.culprits.ranks == (FAULT_RANK,) and verdict.op == "all_reduce"
    assert verdict.culprits.pod == "job-worker-1"
    assert verdict.culprits.stuck_at == f"hang_trainer.py:{BLOCKING_LINE} in load_batch", verdict
    assert verdict.others.ranks == (0, 1, 3)
    # The others are shown waiting inside the all-reduce, at the script's call of it.
    assert "wait in all_reduce" in verdict.details[0]
    assert "hang_trainer.py" in verdict.details[0] and "in main" in verdict.details[0]
    seq = verdict.seq
    assert verdict.headline.startswith(
        f"Hang: rank 2 (pod job-worker-1) never entered all_reduce #{seq} (pg 0)"
    )
    # Every dump came from a hook thread while the training thread was blocked.
    assert all(d.answered and d.flight_recorder for d in dumps)
    assert offline_verdict(tmp_path, answers, capsys) == verdict.headline


def test_an_extra_collective_is_a_mismatch_naming_both_sides(tmp_path, two_pods, capsys):
    answers, _, verdict = diagnose(tmp_path, two_pods, "extra")
    assert verdict.kind == HangKind.MISMATCH, verdict
    assert verdict.culprits.ranks == (FAULT_RANK,) and verdict.culprits.entered.startswith(
        "broadcast"
    )
    assert verdict.others.ranks == (0, 1, 3) and verdict.others.entered.startswith("all_reduce")
    assert offline_verdict(tmp_path, answers, capsys) == verdict.headline


def test_a_different_shape_names_both_shapes(tmp_path, two_pods, capsys):
    answers, dumps, verdict = diagnose(tmp_path, two_pods, "shape")
    assert verdict.kind == HangKind.MISMATCH, verdict
    assert verdict.culprits.ranks == (FAULT_RANK,)
    assert verdict.culprits.entered == "all_reduce [2] Float", verdict
    assert verdict.others.ranks == (0, 1, 3) and verdict.others.entered == "all_reduce [4] Float"
    assert offline_verdict(tmp_path, answers, capsys) == verdict.headline


def test_a_trainer_whose_python_cannot_run_is_reported_with_what_the_sidecar_saw(
    tmp_path, two_pods
):
    """A stopped process (as one whose GIL is held forever) cannot dump: its sidecar says so,
    with the rank's last step, and the others' dumps still name the blocked rank."""
    mark = new_mark()
    processes = launch(tmp_path, two_pods, "block", mark)
    try:
        wait_until_stuck(two_pods, processes)
        [frozen] = [r for r in two_pods[1].status()["ranks"] if r["rank"] == 3]
        os.kill(frozen["pid"], signal.SIGSTOP)
        answers = dump_pods(two_pods, timeout_seconds=5)
    finally:
        stop(processes, mark)
    dumps = {d.rank: d for answer in answers for d in answer.ranks}
    assert [r for r, d in sorted(dumps.items()) if not d.answered] == [3]
    assert dumps[3].step == frozen["globalStep"] and dumps[3].last_step_at is not None
    assert any("rank 3" in note and "did not answer within 5s" in note for note in answers[1].notes)
    verdict = attribute_hang(list(dumps.values()))
    assert verdict.kind == HangKind.MISSING_RANK and verdict.culprits.ranks == (FAULT_RANK,)
