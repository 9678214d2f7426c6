"""How to open the merged trace in Perfetto, in the few steps a reader needs.

The report says what is wrong; the merged trace shows it happening, every rank on one
clock. A reader who does not know where the file is or which tool opens it never gets
there, so the report names the file and the steps: where to get it (beside the report for
`stepscope analyze`; through `stepscope artifacts` for a session, whose links are short-lived
and need no bucket credentials) and where to open it. Perfetto's UI reads the file inside
the browser, so a tenant's trace is not uploaded anywhere by opening it.
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.reports.context import ReportContext
from stepscope.storage import SessionArtifact

# Named, not linked: the page holds no URL at all, so that it plainly reaches nowhere.
PERFETTO_UI = "ui.perfetto.dev"
MERGED_TRACE = SessionArtifact.MERGED_TRACE.value


def _fetch_step(context: ReportContext) -> str:
    """Where the file is: beside the report, or behind the session's artifact links."""
    origin = context.origin
    if context.offline:
        return (
            f"<li>Find <code>{MERGED_TRACE}</code>: <code>stepscope analyze</code> writes it "
            "beside this report.</li>"
        )
    if origin is None or not origin.session:
        return (
            f"<li>Download <code>{MERGED_TRACE}</code>: <code>stepscope artifacts SESSION -n "
            "NAMESPACE --download DIR</code> (or <code>--open trace</code>, which opens its "
            "short-lived link so the browser saves it).</li>"
        )
    namespace, _, name = origin.session.rpartition("/")
    where = f" -n {namespace}" if namespace else ""
    download = f"stepscope artifacts {name}{where} --download ./{name}"
    opened = f"stepscope artifacts {name}{where} --open trace"
    return (
        f"<li>Download <code>{MERGED_TRACE}</code>: <code>{escape(download)}</code> (or "
        f"<code>{escape(opened)}</code>, which opens its short-lived link so the browser "
        "saves it).</li>"
    )


def perfetto_section(context: ReportContext) -> str:
    """The section's body; it says so when the session stored no trace to merge."""
    if context.merged is not None and not context.merged:
        return (
            f"<p>No merged trace was built for this session: no rank stored a trace, so "
            f"there is no <code>{MERGED_TRACE}</code> to open.</p>"
        )
    return (
        f"<p>The merged trace <code>{MERGED_TRACE}</code> puts every rank's steps on one "
        "aligned clock: each rank is a process named “rank N”, so a late rank shows as "
        "the row whose collectives start last.</p><ol>"
        + _fetch_step(context)
        + f"<li>Go to <strong>{PERFETTO_UI}</strong> and choose "
        "<strong>Open trace file</strong> (Perfetto reads the file in the browser; nothing "
        "is uploaded).</li>"
        f"<li>Pick <code>{MERGED_TRACE}</code>; it opens as it is, gzipped.</li></ol>"
    )
