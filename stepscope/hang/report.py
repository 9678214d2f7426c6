"""The readable hang report: the verdict, every rank in one line, and the named ranks' stacks.

It is plain text so it reads the same in a terminal (``stepscope analyze``), in object
storage next to the raw dumps (``hang-report.txt``) and in a ticket. Its size follows the
dumps' bounds: one line per rank, full stacks only for the ranks the verdict names.
"""

from __future__ import annotations

from stepscope.api.hang_dump import RankDump
from stepscope.hang.attribution import HangVerdict
from stepscope.hang.stacks import stuck_at, waiting_in

# Full stacks are printed for at most this many named ranks.
MAX_STACKS = 4


def _last_seqs(dump: RankDump) -> str:
    last: dict[str, int] = {}
    for entry in dump.collectives:
        last[entry.group] = max(last.get(entry.group, 0), entry.seq)
    return ", ".join(f"pg {g} #{s}" for g, s in sorted(last.items())) or "-"


def rank_line(dump: RankDump) -> str:
    where = stuck_at(dump) or (dump.notes[0] if dump.notes else "no stack")
    inside = waiting_in(dump)
    state = f"in {inside}" if inside else f"at {where}"
    if not dump.answered:
        state = f"did not answer: {where}"
    return (
        f"  rank {dump.rank:>4}  pod {dump.pod or '?'}  node {dump.node or '?'}  "
        f"step {dump.step if dump.step is not None else '?'}  last {_last_seqs(dump)}  {state}"
    )


def render_hang_report(verdict: HangVerdict, dumps: list[RankDump]) -> str:
    lines = [verdict.headline, ""]
    lines += [f"  {detail}" for detail in verdict.details]
    if verdict.details:
        lines.append("")
    lines.append(f"kind: {verdict.kind.value}")
    if verdict.seq is not None:
        lines.append(
            f"first divergence: {verdict.op} #{verdict.seq} on process group {verdict.group}"
        )
    lines += ["", f"ranks ({len(dumps)}):"]
    lines += [rank_line(d) for d in sorted(dumps, key=lambda d: d.rank)]
    named = verdict.culprits.ranks if verdict.culprits else ()
    by_rank = {d.rank: d for d in dumps}
    for rank in named[:MAX_STACKS]:
        dump = by_rank.get(rank)
        if dump is None or not dump.threads:
            continue
        lines += ["", f"rank {rank} stacks (innermost last):"]
        for thread in dump.threads:
            lines.append(f"  thread {thread.name}{' (main)' if thread.main else ''}:")
            if thread.frames_dropped:
                lines.append(f"    ... {thread.frames_dropped} outer frames left out")
            for frame in thread.frames:
                lines.append(f"    {frame.file}:{frame.line} in {frame.function}")
                if frame.code:
                    lines.append(f"      {frame.code}")
    return "\n".join(lines) + "\n"
