"""The trainer <-> sidecar socket messages: typed both ways, checked on decode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from stepscope_agent import messages

from stepscope.failures import FailureCode
from stepscope.tiers import Tier

REPO = Path(__file__).resolve().parents[3]

EXAMPLES = [
    messages.Hello(rank=3, pid=42, local_rank=1, world_size=8, torch_version="2.15.0"),
    messages.Progress(global_step=7, step_time_ms=12.5, data_wait_ms=0.25, last_step_at=1.5e9),
    messages.Progress(global_step=0),
    messages.WindowStarted(capture_id="c", first_step=10),
    messages.WindowFinished(
        capture_id="c",
        first_step=10,
        last_step=11,
        steps=[{"step": 10, "durationMs": 1.0, "dataWaitMs": 0.0, "endedAt": 1.0}],
        trace_file="/outbox/c/rank-0.trace.json",
        export_stall_ms=3.0,
    ),
    messages.WindowFailed(
        capture_id="c",
        code=FailureCode.ARMED_AFTER_START,
        message="armed at step 12, after start step 10",
        reached_step=12,
        start_step=10,
    ),
    messages.Arm(capture_id="c", start_step=10, steps=2, warmup_steps=1, tier=Tier.FULL),
    messages.Cancel(capture_id="c"),
    messages.DumpStacks(request_id="hang-1"),
    messages.HangDumpTaken(request_id="hang-1", dump={"rank": 2, "threads": []}),
    messages.Progress(global_step=9, step_time_p95_ms=30.0),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message):
    line = messages.encode(message)
    assert line.endswith(b"\n") and json.loads(line)["type"] == message.TYPE
    assert messages.decode(line) == message


def test_every_message_type_has_an_example():
    assert {type(m) for m in EXAMPLES} == set(messages.MESSAGE_TYPES.values())


def wire(**fields) -> bytes:
    arm = {"type": "arm", "captureId": "c", "startStep": 5, "steps": 2, **fields}
    return json.dumps(arm).encode()


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (wire(startStep="5"), "arm message: field 'startStep' must be an integer, got '5'"),
        (wire(startStep=True), "field 'startStep' must be an integer, got True"),
        (wire(steps=2.5), "field 'steps' must be an integer, got 2.5"),
        (wire(tier="everything"), "field 'tier' must be one of 'steps', 'ops', 'full'"),
        (wire(trace="yes"), "field 'trace' must be true or false"),
        (b'{"type": "arm", "captureId": "c", "steps": 2}', "field 'startStep' is missing"),
        (b'{"type": "hello", "rank": 0}', "hello message: field 'pid' is missing"),
        (b'{"type": "window_failed", "captureId": "c", "code": "oops", "message": "m"}', "code"),
        (b'{"type": "launch"}', "unknown message type 'launch'"),
        (b"[1, 2]", "not a stepscope message"),
        (b"{not json", "not JSON"),
    ],
)
def test_decode_refuses_bad_lines_naming_the_field(line, words):
    with pytest.raises(messages.MessageError) as caught:
        messages.decode(line)
    assert words in str(caught.value)


def test_decode_ignores_keys_it_does_not_know_and_fills_defaults():
    arm = messages.decode(wire(newerField=1))
    assert arm == messages.Arm(capture_id="c", start_step=5, steps=2)
    assert (arm.warmup_steps, arm.tier, arm.trace) == (0, Tier.OPS, True)
    progress = messages.decode(b'{"type": "progress", "globalStep": 3, "stepTimeMs": 4}')
    assert progress.step_time_ms == 4.0 and isinstance(progress.step_time_ms, float)


def test_trainer_side_modules_import_with_the_standard_library_only(tmp_path):
    """The hook directory as agent_image/Dockerfile lays it out, imported with no
    site-packages at all (-S): no pydantic, no torch. windowing and runtime import torch
    (the trainer's own) and so are left out here; the start-up hook test covers them."""
    hook = tmp_path / "hook"
    (hook / "stepscope").mkdir(parents=True)
    for name in ("tiers.py", "failures.py"):
        (hook / "stepscope" / name).write_bytes((REPO / "stepscope" / name).read_bytes())
    package = hook / "stepscope_agent"
    package.mkdir()
    for source in (REPO / "agent_image" / "stepscope_agent").glob("*.py"):
        (package / source.name).write_bytes(source.read_bytes())
    code = (
        "import sys\n"
        "from stepscope_agent import bootstrap, channel, messages, settings, stepping\n"
        "import stepscope.tiers, stepscope.failures\n"
        "assert 'pydantic' not in sys.modules and 'torch' not in sys.modules\n"
        "print(messages.decode(messages.encode(messages.Cancel(capture_id='x'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        check=False,
        cwd=hook,
        env={"PYTHONPATH": str(hook)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Cancel(capture_id='x')" in done.stdout
