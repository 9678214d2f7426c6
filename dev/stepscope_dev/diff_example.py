"""The README's `stepscope diff` example, derived from the current code, never frozen.

Two of the recorded scenarios (tests/data/scenarios): a balanced 4-rank job and the same job
with slow data loading. `make docs-examples` runs the real command (`stepscope diff A B`) and
rewrites the README's block with what it prints on stdout, less its last line, which names the
temporary folder it wrote ``diff.json`` and ``report.html`` to; tests/unit/harness/
test_readme_diff.py runs it again and fails when the block differs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from stepscope_dev.readme_blocks import rewrite_block

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
MARKER = "<!-- stepscope-diff: make docs-examples writes this block; a test checks it -->"
BEFORE = "tests/data/scenarios/balanced"
AFTER = "tests/data/scenarios/data_loading"
COMMAND = f"stepscope diff {BEFORE} {AFTER}"
WROTE = "wrote "


def diff_lines() -> list[str]:
    """What ``stepscope diff`` prints for the two scenarios now, without the ``wrote`` line."""
    printed = subprocess.run(
        [sys.executable, "-m", "stepscope.cli.main", "diff", BEFORE, AFTER],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    lines = [line.rstrip() for line in printed.splitlines()]
    if not lines or not lines[-1].startswith(WROTE):
        raise RuntimeError(f"`{COMMAND}` no longer ends with a {WROTE!r} line:\n{printed}")
    lines.pop()
    while lines and not lines[-1]:
        lines.pop()
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md is not current")
    args = parser.parse_args(argv)
    return rewrite_block(README, MARKER, COMMAND, diff_lines(), "diff", args.check)


if __name__ == "__main__":
    raise SystemExit(main())
