"""Which rank, which collective, which line: the verdict on a hung job from its ranks' dumps.

A distributed job hangs when its ranks disagree about the next collective. Each rank's
flight recorder numbers the collectives it entered on each process group (the sequence
id), so the ranks' sequences align by that number without any clock. Per group, walking
the sequence ids upwards from the first one every rank still holds, the first id where
the ranks disagree is the hang's cause:

- some members never entered it while the others did: a **missing rank** (named, with the
  line its main thread is stuck on); when the ranks that entered are fewer than those that
  did not, the entering ranks issued an **extra collective** instead, and both sides are
  named;
- members entered it with a different op, shapes or dtypes: a **mismatch**, both sides;
- every member entered the last id and it completed on none of them (or not on all): the
  collective **never completed**, a transport or peer failure.

Ranks whose dump holds no sequence (they did not answer, or had no flight recorder) are
unknown: they neither agree nor disagree. When every known rank waits in the same
collective and the only unknown ranks are its missing members, those are named as the
suspects, with what the sidecar saw of them. When groups disagree about which diverged
first, the divergence entered earliest (by the recorder's enqueue time) is the verdict.
Attribution reads digests (stepscope/api/hang_dump.py) as well as full dumps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from stepscope.api.hang_dump import Collective, GroupInfo, RankDump
from stepscope.api.hang_status import HangKind
from stepscope.hang.stacks import most_common, stuck_at, waiting_in
from stepscope.rank_ranges import rank_ranges


@dataclass(frozen=True)
class Placement:
    """Where a rank runs, for ranks whose dump is missing altogether."""

    pod: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class RankSide:
    """One side of a verdict: ranks with what they entered and where they are stuck."""

    ranks: tuple[int, ...]
    entered: str | None  # 'broadcast [4] Float', or None for ranks that did not enter
    stuck_at: str | None  # the first rank's program line
    pod: str | None = None  # of the first rank
    node: str | None = None

    def name(self) -> str:
        if len(self.ranks) == 1:
            where = ", ".join(
                f"{label} {value}"
                for label, value in (("pod", self.pod), ("node", self.node))
                if value
            )
            return f"rank {self.ranks[0]}" + (f" ({where})" if where else "")
        return f"ranks {rank_ranges(self.ranks)}"


@dataclass(frozen=True)
class HangVerdict:
    kind: HangKind
    headline: str
    group: str | None = None
    seq: int | None = None
    op: str | None = None
    culprits: RankSide | None = None
    others: RankSide | None = None
    details: tuple[str, ...] = field(default_factory=tuple)
    entered_at_ns: int | None = None


@dataclass
class _Ranks:
    """One group's view: every known rank's collectives by sequence id."""

    members: list[int]
    entries: dict[int, dict[int, Collective]]
    last: dict[int, int]
    completed: dict[int, int]
    unknown: list[int]


def attribute_hang(
    dumps: list[RankDump], placement: dict[int, Placement] | None = None
) -> HangVerdict:
    """The verdict for one job from its ranks' dumps (one per rank, digests or full)."""
    by_rank = {d.rank: d for d in dumps}
    placement = placement or {}
    # One pass over every dump builds each group's view: group names are the tenant's, so a
    # rescan per name would be quadratic in what a hostile trainer writes.
    views = _views(by_rank)
    verdicts = [
        v
        for g in _group_names(views)
        if (v := _judge_group(g, views[g], by_rank, placement)) is not None
    ]
    if verdicts:
        # The divergence entered first caused the others; unknown times sort last.
        return min(verdicts, key=lambda v: (v.entered_at_ns is None, v.entered_at_ns or 0))
    return _outside_collectives(by_rank)


def _group_names(views: dict[str, _Ranks | None]) -> list[str]:
    return sorted(views, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n))


def _views(by_rank: dict[int, RankDump]) -> dict[str, _Ranks | None]:
    """Every group's view, from one pass over the dumps (None: no known rank is in it)."""
    listed: dict[str, Counter] = {}
    infos: dict[str, dict[int, GroupInfo]] = {}
    owns: dict[str, dict[int, dict[int, Collective]]] = {}
    for rank, dump in by_rank.items():
        for info in dump.groups:
            if info.ranks:
                listed.setdefault(info.name, Counter())[tuple(info.ranks)] += 1
            infos.setdefault(info.name, {}).setdefault(rank, info)
        for c in dump.collectives:
            owns.setdefault(c.group, {}).setdefault(rank, {})[c.seq] = c
    names = set(infos) | set(owns)
    return {
        name: _view(by_rank, listed.get(name), infos.get(name, {}), owns.get(name, {}))
        for name in names
    }


def _view(
    by_rank: dict[int, RankDump],
    listed: Counter | None,
    infos: dict[int, GroupInfo],
    owns: dict[int, dict[int, Collective]],
) -> _Ranks | None:
    entries: dict[int, dict[int, Collective]] = {}
    last, completed = {}, {}
    for rank in sorted(infos.keys() | owns.keys()):
        dump = by_rank[rank]
        if not (dump.answered and dump.flight_recorder):
            continue
        info, own = infos.get(rank), owns.get(rank, {})
        entries[rank] = own
        last[rank] = max([*own, (info.last_enqueued if info else None) or 0])
        done = [c.seq for c in own.values() if c.retired]
        completed[rank] = max([*done, (info.last_completed if info else None) or 0])
    members = list(listed.most_common(1)[0][0]) if listed else sorted(entries)
    if not entries:
        return None
    unknown = [r for r in members if r not in entries]
    return _Ranks(members, entries, last, completed, unknown)


def _judge_group(
    group: str,
    view: _Ranks | None,
    by_rank: dict[int, RankDump],
    placement: dict[int, Placement],
) -> HangVerdict | None:
    if view is None:
        return None
    known = sorted(view.entries)
    # Compare from the first id every rank still holds (older ones fell off the rings),
    # but never past a rank that is behind all of that.
    floor = max((min(e) if e else view.last[r] + 1) for r, e in view.entries.items())
    floor = min(floor, min(view.last.values()) + 1)
    top = max(view.last.values())
    # Only ids some rank holds, or the next one a rank would enter, can diverge; visiting
    # just those keeps the walk as long as the dumps, whatever the ids are.
    held = {s for e in view.entries.values() for s in e} | {v + 1 for v in view.last.values()}
    for seq in sorted(s for s in held if max(floor, 1) <= s <= top):
        inside = [r for r in known if seq in view.entries[r]]
        outside = [r for r in known if view.last[r] < seq]
        signatures = Counter(view.entries[r][seq].signature for r in inside)
        if len(signatures) > 1:
            return _mismatch(group, seq, view, inside, signatures, by_rank)
        if outside:
            return _missing(group, seq, view, inside, outside, by_rank)
    return _unfinished(group, top, view, by_rank, placement)


def _side(ranks: list[int], by_rank: dict[int, RankDump], entered: Collective | None) -> RankSide:
    first = by_rank.get(ranks[0])
    places = [stuck_at(by_rank[r]) for r in ranks if r in by_rank]
    waiting = waiting_in(first) if entered is None and first is not None else None
    return RankSide(
        ranks=tuple(ranks),
        entered=f"{entered.op_name} {entered.shape_text}" if entered else waiting,
        stuck_at=stuck_at(first) if first and len(ranks) == 1 else most_common(places),
        pod=first.pod if first else None,
        node=first.node if first else None,
    )


def _label(op: str, seq: int, group: str) -> str:
    return f"{op} #{seq} (pg {group})"


def _mismatch(group, seq, view, inside, signatures, by_rank) -> HangVerdict:
    common_sig = signatures.most_common(1)[0][0]
    majority = [r for r in inside if view.entries[r][seq].signature == common_sig]
    minority = [r for r in inside if r not in majority]
    common, odd = view.entries[majority[0]][seq], view.entries[minority[0]][seq]
    odd_side, common_side = _side(minority, by_rank, odd), _side(majority, by_rank, common)
    headline = (
        f"Hang: collective mismatch at #{seq} (pg {group}): {odd_side.name()} entered "
        f"{odd_side.entered}, {common_side.name()} entered {common_side.entered}"
    )
    if odd_side.stuck_at:
        headline += f"; {odd_side.name().split(' (')[0]} is at {odd_side.stuck_at}"
    return HangVerdict(
        HangKind.MISMATCH,
        headline,
        group,
        seq,
        common.op_name,
        odd_side,
        common_side,
        entered_at_ns=_entered_at(view, inside, seq),
    )


def _missing(group, seq, view, inside, outside, by_rank) -> HangVerdict:
    entry = view.entries[inside[0]][seq]
    label = _label(entry.op_name, seq, group)
    if len(inside) >= len(outside):
        culprits, others = _side(outside, by_rank, None), _side(inside, by_rank, entry)
        headline = f"Hang: {culprits.name()} never entered {label}"
        kind = HangKind.MISSING_RANK
    else:
        culprits, others = _side(inside, by_rank, entry), _side(outside, by_rank, None)
        headline = (
            f"Hang: {culprits.name()} entered an extra {label} that {others.name()} never entered"
        )
        kind = HangKind.EXTRA_COLLECTIVE
    if culprits.stuck_at:
        headline += f"; stuck at {culprits.stuck_at}"
    details = [_waiting_line(others, label if kind is HangKind.MISSING_RANK else None)]
    if view.unknown:
        details.append(f"ranks {rank_ranges(view.unknown)} gave no collectives to compare")
    return HangVerdict(
        kind,
        headline,
        group,
        seq,
        entry.op_name,
        culprits,
        others,
        tuple(details),
        _entered_at(view, inside, seq),
    )


def _waiting_line(side: RankSide, label: str | None) -> str:
    inside = f"wait in {label}" if label else f"are in {side.entered or 'no collective'}"
    where = f" at {side.stuck_at}" if side.stuck_at else ""
    return f"{side.name()} {inside}{where}"


def _unfinished(group, top, view, by_rank, placement) -> HangVerdict | None:
    """No rank disagrees up to `top`: either it never completed, or nothing is wrong here."""
    pending = [r for r in sorted(view.entries) if view.completed[r] < top]
    if not pending or top == 0:
        return None
    # A rank's last id can lie beyond what its ring (or a digest) still holds: then no entry
    # says which op it was, and the verdict says so instead of failing.
    entry = next((view.entries[r][top] for r in pending if top in view.entries[r]), None)
    label = _label(entry.op_name if entry else "a collective", top, group)
    waiting = _side(pending, by_rank, entry)
    if view.unknown:
        suspects = _suspects(view.unknown, by_rank, placement)
        headline = (
            f"Hang: {suspects.name()} did not report (no dump or no flight recorder) while "
            f"{waiting.name()} wait in {label}; it is the likely missing rank"
        )
        if suspects.stuck_at:
            headline += f"; {suspects.stuck_at}"
        return HangVerdict(
            HangKind.MISSING_RANK,
            headline,
            group,
            top,
            entry.op_name if entry else None,
            suspects,
            waiting,
            (_waiting_line(waiting, label),),
            _entered_at(view, pending, top),
        )
    headline = (
        f"Hang: every rank of pg {group} entered {label} and it never completed on "
        f"{waiting.name()}: a transport or peer failure"
    )
    return HangVerdict(
        HangKind.NEVER_COMPLETED,
        headline,
        group,
        top,
        entry.op_name if entry else None,
        waiting,
        None,
        (_waiting_line(waiting, label),),
        _entered_at(view, pending, top),
    )


def _suspects(ranks: list[int], by_rank: dict[int, RankDump], placement) -> RankSide:
    first = by_rank.get(ranks[0])
    where = placement.get(ranks[0], Placement())
    note = first.notes[0] if first is not None and first.notes else "no dump from its pod"
    return RankSide(
        ranks=tuple(ranks),
        entered=None,
        stuck_at=note,
        pod=(first.pod if first else None) or where.pod,
        node=(first.node if first else None) or where.node,
    )


def _outside_collectives(by_rank: dict[int, RankDump]) -> HangVerdict:
    answered = [d for d in by_rank.values() if d.answered and d.threads]
    if not answered:
        notes = [n for d in by_rank.values() for n in d.notes][:3]
        return HangVerdict(
            HangKind.NO_EVIDENCE,
            "Hang: no rank gave a usable dump" + (f" ({'; '.join(notes)})" if notes else ""),
        )
    place = most_common([stuck_at(d) for d in answered])
    ranks = sorted(d.rank for d in answered if stuck_at(d) == place)
    return HangVerdict(
        HangKind.NOT_IN_COLLECTIVE,
        f"Hang: no collective is pending and the ranks agree on every sequence id; "
        f"ranks {rank_ranges(ranks)} are at {place}",
        culprits=RankSide(tuple(ranks), None, place),
    )


def _entered_at(view: _Ranks, ranks: list[int], seq: int) -> int | None:
    times = [
        view.entries[r][seq].created_ns
        for r in ranks
        if seq in view.entries[r] and view.entries[r][seq].created_ns
    ]
    return min(times) if times else None
