"""``stepscope analyze DIR`` on a folder of hang dumps: the same verdict, without a cluster.

The folder holds what a hang-check session stored (``rank-<r>/hang-dump.json``, one
RankDump each) or what the agents answered (a PodHangDumps per pod); both are read, in
any nesting. Every file is read with a byte bound and validated like the operator
validates an agent's answer; a file that is neither is named and skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError

from stepscope.api.hang_dump import MAX_DUMP_BYTES, PodHangDumps, RankDump
from stepscope.hang.attribution import HangVerdict, attribute_hang
from stepscope.hang.report import render_hang_report

HANG_DUMP_KIND = "stepscope-hang-dump"
REPORT_NAME = "hang-report.txt"
# A pod's answer carries up to 64 ranks' digests.
MAX_FILE_BYTES = 64 * MAX_DUMP_BYTES
MAX_FILES = 8192


class NoHangDumps(ValueError):
    """The folder holds no readable hang dump."""


def holds_hang_dumps(path: str) -> bool:
    """Whether `path` is a local folder with at least one hang dump in it."""
    folder = Path(path)
    if not folder.is_dir():
        return False
    return any(_looks_like_dump(p) for p in _json_files(folder))


def _json_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.json") if p.is_file())[:MAX_FILES]


def _looks_like_dump(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            head = file.read(4096)
    except OSError:
        return False
    return HANG_DUMP_KIND.encode() in head or path.name == "hang-dump.json"


def load_dumps(folder: Path, notes: list[str]) -> list[RankDump]:
    """Every rank's dump under `folder`; for a rank found twice, an answered one wins."""
    found: dict[int, RankDump] = {}
    for path in _json_files(folder):
        if not _looks_like_dump(path):
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
            raw = json.loads(path.read_bytes())
            dumps = _parse(raw)
        except (OSError, ValueError, ValidationError) as error:
            notes.append(f"skipped {path}: {str(error).splitlines()[0][:200]}")
            continue
        for dump in dumps:
            if dump.rank not in found or (dump.answered and not found[dump.rank].answered):
                found[dump.rank] = dump
    if not found:
        raise NoHangDumps(f"no readable hang dump under {folder}")
    return [found[rank] for rank in sorted(found)]


def _parse(raw: object) -> list[RankDump]:
    if isinstance(raw, dict) and raw.get("kind") == HANG_DUMP_KIND:
        return [RankDump.model_validate(raw)]
    if isinstance(raw, dict) and "ranks" in raw:
        return PodHangDumps.model_validate(raw).ranks
    raise ValueError("neither a rank's hang dump nor a pod's answer")


def analyze_hang_dumps(folder: Path) -> tuple[HangVerdict, str, list[str]]:
    """(verdict, report text, notes) for the dumps under `folder`."""
    notes: list[str] = []
    dumps = load_dumps(folder, notes)
    verdict = attribute_hang(dumps)
    return verdict, render_hang_report(verdict, dumps), notes


def cmd_analyze_hangs(path: str, out_dir: Path) -> int:
    try:
        verdict, report, notes = analyze_hang_dumps(Path(path))
    except NoHangDumps as error:
        print(f"stepscope analyze: {error}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(report, end="")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / REPORT_NAME).write_text(report, encoding="utf-8")
    print(f"\nwrote {out_dir / REPORT_NAME}")
    return 0
