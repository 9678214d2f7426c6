"""The report's memory section: what each rank's allocated peak is made of.

One row per rank with a composition (``reading.memory_composition``), the largest peaks
first, up to ``TABLE_MAX_RANKS``: the peak, its step and phase, and a bar split into
the parts, each also in GiB. Every string from the trace is escaped.
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.findings.memory_advice import size_text
from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.model.rank_summary import MemoryComposition

TABLE_MAX_RANKS = 64
# (label, colour, bytes of the part); held is None on CPU traces and then left out.
PARTS = (
    ("parameters and optimizer state (held)", "#4c78a8", lambda c: c.held_bytes),
    ("activations and forward outputs", "#f58518", lambda c: c.forward_bytes),
    ("gradients and backward buffers", "#54a24b", lambda c: c.backward_bytes),
    ("optimizer step", "#b279a2", lambda c: c.optimizer_bytes),
    ("other", "#bab0ac", lambda c: c.other_bytes),
)
BAR_WIDTH_PX = 360


def memory_section(job: JobSummary) -> str | None:
    """The section's body, or None when no rank's trace said what its peak is made of."""
    rows = [(s.rank, s.memory.composition) for s in job.ranks if s.memory.composition]
    if not rows:
        return None
    rows.sort(key=lambda row: (-row[1].peak_bytes, row[0]))
    shown = rows[:TABLE_MAX_RANKS]
    body = "".join(_row(rank, composition) for rank, composition in shown)
    left = len(rows) - len(shown)
    more = f"<p>{left} more ranks in summary.json.</p>" if left > 0 else ""
    legend = " ".join(
        f'<span style="color:{colour}">&#9632;</span> {escape(label)}' for label, colour, _ in PARTS
    )
    cpu = any(c.held_bytes is None for _, c in rows)
    note = (
        "<p>CPU totals count only what was allocated while profiling: parameters and "
        "optimizer state made earlier are not in those peaks.</p>"
        if cpu
        else ""
    )
    return (
        "<p>Bytes alive at each rank's allocated peak, by the phase of the step that "
        f"allocated them.</p><p>{legend}</p>{note}"
        "<table><tr><th>rank</th><th>peak</th><th>where</th><th>composition</th>"
        f"<th>unexplained</th></tr>{body}</table>{more}"
    )


def _row(rank: int, composition: MemoryComposition) -> str:
    where = composition.phase or ""
    if composition.step is not None:
        where = f"step {composition.step}, {where}"
    return (
        f"<tr><td>{rank}</td><td>{size_text(composition.peak_bytes)}</td><td>{escape(where)}</td>"
        f"<td>{_bar(composition)}</td><td>{size_text(composition.unexplained_bytes)}</td></tr>"
    )


def _bar(composition: MemoryComposition) -> str:
    """A stacked bar of the parts, each segment titled with its GiB and share."""
    segments = []
    for label, colour, part_of in PARTS:
        part = part_of(composition)
        if not part:
            continue
        share = composition.share_pct(part)
        width = max(1, round(BAR_WIDTH_PX * share / 100))
        segments.append(
            f'<span title="{escape(label)}: {size_text(part)} ({share:.0f}%)" '
            f'style="display:inline-block;height:12px;width:{width}px;background:{colour}">'
            "</span>"
        )
    return "".join(segments)
