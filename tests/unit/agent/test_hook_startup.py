"""The start-up hook: inert for programs that do not train, chains other sitecustomize
modules, and waits for the program's own torch import."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HOOK_DIR = REPO / "agent_image" / "hook"

PROBE = """
import json, os, sys, threading
fds = [os.path.join("/proc/self/fd", fd) for fd in os.listdir("/proc/self/fd")]
sockets = sum(os.readlink(fd).startswith("socket:") for fd in fds if os.path.exists(fd))
print(json.dumps({
    "threads": threading.active_count(),
    "sockets": sockets,
    "torch": "torch" in sys.modules,
    "watching": any(type(f).__name__ == "_TorchImportWatcher" for f in sys.meta_path),
    "chained": os.environ.get("CHAINED_SITECUSTOMIZE_RAN"),
}))
"""


def run_python(code: str, agent_dir: Path | None, extra_path: list[Path] = (), *flags: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [HOOK_DIR, *extra_path])
    if agent_dir is not None:
        env["STEPSCOPE_AGENT_DIR"] = str(agent_dir)
    return subprocess.run(
        [sys.executable, *flags, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_a_program_that_never_imports_torch_gets_no_thread_socket_or_torch(tmp_path):
    probe = json.loads(run_python(PROBE, tmp_path).stdout)
    assert probe == {"threads": 1, "sockets": 0, "torch": False, "watching": True, "chained": None}


def test_without_the_agent_dir_the_hook_does_nothing(tmp_path):
    probe = json.loads(run_python(PROBE, None).stdout)
    assert probe["watching"] is False


def test_an_existing_sitecustomize_later_on_the_path_still_runs(tmp_path):
    other = tmp_path / "image-site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import os\nos.environ['CHAINED_SITECUSTOMIZE_RAN'] = 'yes'\n"
    )
    probe = json.loads(run_python(PROBE, tmp_path, [other]).stdout)
    assert probe["chained"] == "yes"
    assert probe["watching"] is True


def test_start_up_cost_is_small(tmp_path):
    """Import time of the whole hook as Python measures it (-X importtime); the best of five
    runs, so a busy machine does not decide the result."""
    costs = []
    for _ in range(5):
        stderr = run_python("pass", tmp_path, [], "-X", "importtime").stderr
        cumulative_us = {
            match.group(2).strip(): int(match.group(1))
            for match in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \|(.*)", stderr)
        }
        assert "stepscope_agent.bootstrap" in cumulative_us
        costs.append(cumulative_us["sitecustomize"])
    # About 1-2 ms on an idle machine; importing torch takes seconds.
    assert min(costs) < 10_000, costs


def test_importing_torch_installs_the_step_hook_but_starts_nothing_until_a_step(tmp_path):
    code = """
import json, threading, torch
from torch.optim import optimizer
from stepscope_agent import runtime
before = threading.active_count()
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
print(json.dumps({
    "hooks": len(optimizer._global_optimizer_post_hooks),
    "threads_before_step": before,
    "channel_before_step": runtime._runtime.channel is not None,
    "pydantic": "pydantic" in __import__("sys").modules,  # training images need not have it
}))
model(torch.ones(1, 2)).sum().backward()
opt.step()
print(json.dumps({"threads_after_step": threading.active_count(), "step": runtime._runtime.counter.current}))
"""
    out = run_python(code, tmp_path).stdout.splitlines()
    plain = run_python("import threading, torch; print(threading.active_count())", None).stdout
    before, after = json.loads(out[0]), json.loads(out[1])
    assert before == {
        "hooks": 1,
        "threads_before_step": int(plain),
        "channel_before_step": False,
        "pydantic": False,
    }
    assert after == {"threads_after_step": int(plain) + 1, "step": 1}
