"""Python code run in a child process under an address-space limit, each child forked from one
warm interpreter instead of started fresh.

The hostile-trace corpus runs about a hundred such children. A fresh interpreter that imports
the readers costs about half a second of CPU before it reads a byte; a fork of one that already
has them imported costs milliseconds, and each child is still its own process: its own memory
limit (set after the fork, over everything it inherited, as a fresh child's covers the
interpreter and its imports), its own environment, working folder and exit status, and an alarm
that ends it when it runs past its time. The warm interpreter itself reads no trace, so no
reader state reaches a child from an earlier one.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Runs in the warm interpreter: one JSON request a line on stdin, one reply a line on stdout.
SERVER = r"""
import json, os, resource, runpy, signal, sys, traceback
import stepscope.analysis.reports.merged_trace, stepscope.cli.main  # noqa: F401 (the warm part)

def run_child(request):
    resource.setrlimit(resource.RLIMIT_AS, (request["limit"], request["limit"]))
    signal.alarm(request["timeout"])  # the default action ends the child
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = list(request["argv"])
    status = 0
    try:
        if request["module"]:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            status = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        run_child(request)
    _, wait_status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(wait_status)}), flush=True)
"""


@dataclass(frozen=True)
class Finished:
    """What ``subprocess.run`` would have said of the child."""

    returncode: int
    stdout: str
    stderr: str


class LimitedPython:
    """The warm interpreter; ``run`` takes the arguments ``python`` would (``-c CODE ...`` or
    ``-m MODULE ...``)."""

    def __init__(self, address_space_limit: int, timeout_s: int) -> None:
        self.limit = address_space_limit
        self.timeout_s = timeout_s
        self.server = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, args: list[str], cwd: Path) -> Finished:
        flag, target, *rest = args
        if flag not in ("-c", "-m"):
            raise ValueError(f"run takes -c CODE or -m MODULE, not {flag!r}")
        out, err = cwd / "child.stdout", cwd / "child.stderr"
        request = {
            "code": target if flag == "-c" else "",
            "module": target if flag == "-m" else "",
            "argv": ["-c" if flag == "-c" else target, *rest],
            "cwd": str(cwd),
            "env": dict(os.environ),
            "limit": self.limit,
            "timeout": self.timeout_s,
            "stdout": str(out),
            "stderr": str(err),
        }
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        # The child's alarm bounds the wait; this bounds a server that stopped answering.
        ready, _, _ = select.select([self.server.stdout], [], [], self.timeout_s + 30)
        if not ready:
            raise TimeoutError(
                f"the warm interpreter did not answer within {self.timeout_s + 30} s"
            )
        reply = json.loads(self.server.stdout.readline())
        return Finished(reply["returncode"], out.read_text(), err.read_text())

    def close(self) -> None:
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
