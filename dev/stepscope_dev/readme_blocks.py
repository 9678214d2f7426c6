"""The README's generated blocks: a marker comment, then a fenced block whose first line is the
``$`` command that printed it. `make docs-examples` rewrites each block from the current code and
a test derives it again and compares, so no output a user reads is ever frozen."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def block_lines(text: str, marker: str) -> list[str]:
    """The lines of the fenced block right after ``marker``, without its ``$`` command line."""
    if marker not in text:
        raise ValueError(f"README.md lost the marker {marker!r} above its generated block")
    after = text.split(marker, 1)[1].lstrip("\n")
    if not after.startswith("```"):
        raise ValueError(f"the generated block must follow the marker {marker!r} directly")
    body = after.split("\n", 1)[1].split("```", 1)[0]
    return [line.rstrip() for line in body.splitlines() if not line.startswith("$ ")]


def with_block_lines(text: str, marker: str, command: str, lines: Sequence[str]) -> str:
    """README text with the block after ``marker`` replaced by ``$ command`` and ``lines``."""
    head, after = text.split(marker, 1)
    tail = after.lstrip("\n").split("\n", 1)[1].split("```\n", 1)[1]
    block = "\n".join([f"$ {command}", *lines])
    return f"{head}{marker}\n```\n{block}\n```\n{tail}"


def rewrite_block(
    readme: Path, marker: str, command: str, lines: Sequence[str], what: str, check: bool
) -> int:
    """Rewrite ``readme``'s block after ``marker`` with ``$ command`` and ``lines`` unless it is
    current already; with ``check``, only say whether it is. The exit status: 1 for a stale
    block under ``check``, else 0."""
    text = readme.read_text(encoding="utf-8")
    if block_lines(text, marker) == list(lines):
        print(f"README.md's {what} block is current")
        return 0
    if check:
        print(f"README.md's {what} block is stale; run `make docs-examples`", file=sys.stderr)
        return 1
    readme.write_text(with_block_lines(text, marker, command, lines))
    print(f"README.md's {what} block rewritten from the current code")
    return 0
