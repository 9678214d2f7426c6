"""The report's critical-path section: for each step, the ranks that bound it and why, how
its path divides into CPU, GPU, launch work and time off the path, and its longest ops or
kernels; for a path spliced across ranks, its pieces rank by rank, and for one that is not,
why not.

One row per step (at most ``MAX_PATH_STEPS``, as the summaries carry), the step's own
segments beside it; ranks that could not follow a path say why below the table. Every
string from the trace is escaped.
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.model.job_summary import JobSummary

_CHOSEN = {
    "spliced": "spliced: before each collective the rank that arrived last at it",
    "arrived_last": "arrived last at the first collective",
    "longest_step": "longest step (no collective joined the ranks)",
}


def critical_path_section(job: JobSummary) -> str | None:
    """The section's body, or None when no rank had a critical path."""
    found = job.critical_path
    if found is None:
        return None
    parts = []
    if found.typical is not None:
        typical = found.typical
        path = typical.path
        who = f"rank <b>{typical.rank}</b> bounds the step"
        if typical.chosen_by == "spliced":
            who = f"ranks <b>{', '.join(map(str, typical.ranks))}</b> bound the step"
        parts.append(
            f"<p>In the typical step ({path.step}) {who} "
            f"({_CHOSEN[typical.chosen_by]}): its critical path holds "
            f"<b>{path.length_ms:.1f} ms</b> of work in a {path.step_ms:.1f} ms step "
            f"({_share(path.cpu_ms, path.length_ms)} CPU, "
            f"{_share(path.gpu_ms, path.length_ms)} GPU, "
            f"{_share(path.launch_ms + path.kernel_gap_ms, path.length_ms)} launches and "
            f"gaps between kernels), and {path.between_ops_ms:.1f} ms between host ops and "
            f"{path.sync_wait_ms:.1f} ms waiting on syncs.</p>"
        )
    rows = "".join(
        f"<tr><td>{entry.path.step}</td><td>{_ranks(entry)}</td>"
        f"<td>{escape(_CHOSEN[entry.chosen_by])}</td>"
        f"<td>{entry.path.step_ms:.1f}</td><td>{entry.path.length_ms:.1f}</td>"
        f"<td>{entry.path.cpu_ms:.1f}</td><td>{entry.path.gpu_ms:.1f}</td>"
        f"<td>{entry.path.launch_ms + entry.path.kernel_gap_ms:.1f}</td>"
        f"<td>{entry.path.between_ops_ms:.1f}</td><td>{entry.path.sync_wait_ms:.1f}</td>"
        f"<td>{_segments(entry.path.segments)}</td></tr>"
        for entry in found.steps
    )
    if rows:
        parts.append(
            "<table><tr><th>step</th><th>rank</th><th>on the path because</th>"
            "<th>step ms</th><th>path work ms</th><th>CPU</th><th>GPU</th><th>launch</th>"
            "<th>between ops</th><th>sync wait</th><th>longest on the path</th></tr>"
            f"{rows}</table>"
        )
    for entry in found.steps:
        if entry.pieces:
            pieces = " → ".join(_piece(piece) for piece in entry.pieces)
            parts.append(f"<p>Step {entry.path.step}, piece by piece: {pieces}.</p>")
        elif entry.note:
            parts.append(f"<p>Step {entry.path.step} not spliced: {escape(entry.note)}.</p>")
    for rank, reason in sorted(found.unknown_reasons.items()):
        parts.append(f"<p>Rank {rank}: {escape(reason)}.</p>")
    return "".join(parts) or None


def _ranks(entry) -> str:
    if entry.chosen_by == "spliced":
        return ", ".join(map(str, entry.ranks))
    return str(entry.rank)


def _piece(piece) -> str:
    until = f"up to {escape(piece.collective)}" if piece.collective else "after the last"
    top = f"; {escape(piece.top.kind)} {escape(piece.top.name)}" if piece.top else ""
    return f"rank {piece.rank} {until}: {piece.ms:.2f} ms ({piece.length_ms:.2f} ms work{top})"


def _share(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole > 0 else "—"


def _segments(segments) -> str:
    return "<br>".join(f"{escape(s.kind)} {escape(s.name)}: {s.ms:.2f} ms" for s in segments)
