"""The report's per-rank table: every rank of a small job, only the named ones at scale.

A table of 1024 near-identical rows says nothing; the ranks the verdict names (and the
ones whose full traces are in the merged trace) are the ones a reader will open, so at
scale only they get rows, each with why it is named, next to a row of medians over all
ranks to compare them with. The ranks that are not listed are named as ranges.
"""

from __future__ import annotations

import statistics
from html import escape

from stepscope.analysis.merging.trace_selection import ROOM_IN_BUDGET
from stepscope.analysis.model.rank_summary import Breakdown
from stepscope.analysis.reports.context import MAX_NAMED_RANKS, ReportContext
from stepscope.analysis.reports.plots import CATEGORY_LABELS
from stepscope.rank_ranges import rank_ranges


def _header() -> str:
    return (
        "<tr><th>rank</th><th>named for</th><th>node</th><th>step ms</th>"
        + "".join(f"<th>{escape(label)} %</th>" for label in CATEGORY_LABELS.values())
        + "<th>overlapped comm %</th><th>arrival lag ms</th><th>lateness p</th>"
        + "<th>clock offset µs</th></tr>"
    )


def _cells(values: list[str], named: bool = False) -> str:
    klass = ' class="named"' if named else ""
    return f"<tr{klass}>" + "".join(f"<td>{escape(c)}</td>" for c in values) + "</tr>"


def _rank_row(context: ReportContext, rank: int) -> str:
    job = context.job
    arrival = next((a for a in job.arrivals if a.rank == rank), None)
    breakdown = job.rank_breakdowns.get(rank)
    where = job.placement.get(rank)
    step_ms = context.rank_step_ms.get(rank)
    reasons = context.named.get(rank, [])
    cells = [
        str(rank),
        ", ".join(reasons),
        (where.node or "") if where else "",
        f"{step_ms:.2f}" if step_ms is not None else "",
    ]
    if breakdown is not None:
        cells += [f"{breakdown.percent(c):.1f}" for c in Breakdown.CATEGORIES]
        cells.append(f"{breakdown.percent('comm_overlapped_ms'):.1f}")
    else:
        cells += [""] * (len(Breakdown.CATEGORIES) + 1)
    cells += [f"{arrival.median_lag_ms:.2f}", f"{arrival.p_value:.2g}"] if arrival else ["", ""]
    cells.append(f"{job.offsets_us.get(rank, 0.0):.1f}")
    return (
        f'<tr data-rank="{rank}"'
        + (' class="named"' if reasons else "")
        + ">"
        + "".join(f"<td>{escape(c)}</td>" for c in cells)
        + "</tr>"
    )


def _median_row(context: ReportContext) -> str:
    job = context.job

    def median(values) -> str:
        values = list(values)
        return f"{statistics.median(values):.2f}" if values else ""

    breakdowns = list(job.rank_breakdowns.values())
    cells = [f"median of {len(job.ranks)}", "", "", median(context.rank_step_ms.values())]
    cells += [median(b.percent(c) for b in breakdowns) for c in Breakdown.CATEGORIES]
    cells.append(median(b.percent("comm_overlapped_ms") for b in breakdowns))
    cells += [
        median(a.median_lag_ms for a in job.arrivals),
        "",  # a median of p-values means nothing: each rank's test stands alone
    ]
    cells.append("")
    return _cells(cells)


def rank_detail(context: ReportContext) -> str:
    """The per-rank table and, at scale, what it leaves out."""
    ranks = sorted(s.rank for s in context.job.ranks)
    if context.small:
        listed = ranks
        intro = ""
    else:
        listed = sorted(context.named)
        intro = (
            f'<p class="muted">{len(listed)} of {len(ranks)} ranks: the ones the verdict or the '
            "merged trace names, each with why; the last row gives the median over all ranks.</p>"
        )
    rows = "".join(_rank_row(context, rank) for rank in listed)
    if not context.small:
        rows += _median_row(context)
    after = []
    if context.unlisted_named:
        after.append(
            f"{len(context.unlisted_named)} more named rank(s) past the first {MAX_NAMED_RANKS} "
            f"are not listed: {rank_ranges(context.unlisted_named)}."
        )
    if context.merged_selection:
        after.append(f"Merged trace: {context.merged_selection}.")
    room = sorted(
        rank
        for rank, reasons in (context.merged or {}).items()
        if rank not in context.named and ROOM_IN_BUDGET in reasons
    )
    if room and not context.small:
        after.append(
            f"The merged trace also holds the full traces of {len(room)} other rank(s) "
            f"({ROOM_IN_BUDGET}): {rank_ranges(room)}."
        )
    notes = "".join(f'<p class="muted">{escape(text)}</p>' for text in after)
    return f'{intro}<table class="ranks">{_header()}{rows}</table>{notes}'
