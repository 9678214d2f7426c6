"""Render a job summary as one self-contained HTML page that answers first.

Everything is inline (CSS and SVG, no scripts, no fonts or CDNs) so the page
opens from S3, an email attachment or an air-gapped cluster alike; its Content Security
Policy forbids scripts and fetches outright, so even a name that slipped past escaping
could neither run nor call out. The top of the page is the answer: a title naming whose
steps these are (`origin`), one sentence with its confidence, and the step time with its
breakdown (`verdict`). Then the findings in words, the arrival-lag heatmap that shows a
late rank before the step-time heatmap (flat when ranks wait for each other), how to open
the merged trace, and the detail. Names in findings, pods and nodes come from tenants
and are escaped wherever they are written.

The page is a list of sections (`SECTIONS`), each a function of one `ReportContext`; a
small job keeps a bar, a line and a table row per rank, and past `SMALL_JOB_RANKS` ranks
the rank x step heatmaps and the distributions across ranks carry the picture while only
the named ranks keep rows of their own, so the page stays bounded whatever the rank count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from stepscope.analysis.model.job_summary import Finding, JobSummary
from stepscope.analysis.reports.bandwidth import bandwidth_section
from stepscope.analysis.reports.context import ReportContext
from stepscope.analysis.reports.counters import gpu_section
from stepscope.analysis.reports.critical_path import critical_path_section
from stepscope.analysis.reports.distributions import distributions
from stepscope.analysis.reports.efficiency import efficiency_section
from stepscope.analysis.reports.heatmaps import binning_note, heatmap
from stepscope.analysis.reports.memory import memory_section
from stepscope.analysis.reports.origin import ReportOrigin, origin_facts, report_title
from stepscope.analysis.reports.perfetto import perfetto_section
from stepscope.analysis.reports.plots import breakdown_per_rank, step_times
from stepscope.analysis.reports.rank_detail import rank_detail
from stepscope.analysis.reports.verdict import bottleneck_text, step_overview, verdict_sentence

Values = Mapping[int, Mapping[int, float]]

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.origin { color: #555; margin-top: 0; }
.verdict { font-size: 1.2rem; font-weight: 600; border-left: 6px solid #d62728;
  padding: 0.5rem 0.9rem; background: #fdf3f2; }
.verdict.calm { border-color: #1f77b4; background: #f1f6fb; }
.steptime { margin: 1rem 0 0.4rem; }
.stepbar { display: flex; height: 22px; border-radius: 3px; overflow: hidden; }
.stepbar .part { display: block; height: 100%; }
ul.shares { list-style: none; padding: 0; margin: 0.4rem 0; display: flex; flex-wrap: wrap;
  gap: 0.2rem 1.2rem; font-size: 0.9rem; }
.swatch { display: inline-block; width: 0.8rem; height: 0.8rem; margin-right: 0.35rem;
  vertical-align: -0.1rem; }
code { background: #f3f3f3; padding: 0 0.2rem; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.finding { border-left: 4px solid #bbb; padding: 0.4rem 0.8rem; margin: 0.8rem 0; }
.finding.high { border-color: #d62728; } .finding.medium { border-color: #ff7f0e; }
.finding.low { border-color: #e6c200; } .finding.info { border-color: #1f77b4; }
.badge { font-size: 0.75rem; text-transform: uppercase; font-weight: 600; margin-right: 0.5rem; }
.muted { color: #666; font-size: 0.85rem; }
.facts td { text-align: left; }
svg.plot { max-width: 100%; height: auto; display: block; margin: 0.5rem 0; }
tr.named td { background: #fff6e0; }
h3 { font-size: 1rem; margin-top: 1.2rem; }
"""


# No scripts, no fetches of any kind; inline styles only (the SVGs and the step bar use them).
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'"


def _facts(job: JobSummary) -> str:
    straggler = "none"
    if job.straggler:
        lag = job.straggler
        straggler = (
            f"rank {lag.rank} (+{lag.excess_ms:.1f} ms per step, p {lag.p_value:.2g}, "
            f"last in {lag.last_arrival_fraction:.0%} of {lag.steps} steps)"
        )
    if job.slow_node:
        straggler += f"; slow node {job.slow_node.node} (ranks {job.slow_node.ranks})"
    alignment = "not aligned (single rank or no shared collectives)"
    if job.alignment:
        alignment = (
            f"{job.alignment.matched_collectives} collectives matched by "
            f"{job.alignment.match_key}; residual median {job.alignment.residual_median_abs_us:.0f}"
            f" µs, p90 {job.alignment.residual_p90_abs_us:.0f} µs"
        )
    imbalance = f"{job.load_imbalance:.1%}" if job.load_imbalance is not None else "n/a"
    rows = [
        ("Ranks", str(job.world_size)),
        ("Common steps", ", ".join(map(str, job.common_steps)) or "none"),
        ("Median step time", f"{job.median_step_ms:.2f} ms"),
        ("Bottleneck", bottleneck_text(job)),
        ("Straggler", straggler),
        ("Lateness at collectives", job.lateness_pattern.value.replace("_", " ")),
        ("Load imbalance (median over steps)", imbalance),
        ("Alignment", alignment),
    ]
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts">{body}</table>'


def _finding(finding: Finding) -> str:
    """A finding in words: its claim, confidence and cost, the sentence that reads its
    numbers, and what to do. The numbers' keys stay in summary.json, for programs."""
    cost = f", costs {finding.impact_pct:.0f}% of the step" if finding.impact_pct >= 1 else ""
    return (
        f'<div class="finding {finding.severity.value}" data-finding="{escape(finding.id)}">'
        f'<div><span class="badge">{finding.severity.value}</span>'
        f"<strong>{escape(finding.title)}</strong> "
        f'<span class="muted">(confidence {finding.confidence:.2f}{cost})</span>'
        f"</div><p>{escape(finding.evidence.text)}</p>"
        f"<p><em>Recommendation:</em> {escape(finding.recommendation)}</p></div>"
    )


def _findings(context: ReportContext) -> str:
    found = "".join(_finding(f) for f in context.job.findings)
    if not found:
        return "<p>No findings: nothing stands out.</p>"
    return found + (
        '<p class="muted">The numbers behind each finding, by name, are in summary.json '
        "(findings[].evidence.numbers).</p>"
    )


def _details(context: ReportContext) -> str:
    return _facts(context.job)


def _heatmap_section(what: str, unit: str, values_of: Callable[[ReportContext], Values]):
    def render(context: ReportContext) -> str | None:
        values = values_of(context)
        if len(context.job.ranks) < 2 or not any(values.values()):
            return None
        return (
            f'<p class="muted">{escape(binning_note(context))} Outlined rows are the ranks the '
            "verdict names; hover a row for its numbers.</p>" + heatmap(context, values, what, unit)
        )

    return render


def _small_job_only(render: Callable[[JobSummary], str]):
    """Per-rank bars and lines read up to SMALL_JOB_RANKS; past that the distributions
    and heatmaps replace them."""

    def section(context: ReportContext) -> str | None:
        return render(context.job) if context.small else None

    return section


def _notes(context: ReportContext) -> str | None:
    notes = context.job.notes
    return "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>" if notes else None


@dataclass(frozen=True)
class Section:
    """One titled part of the report; `render` returns None to leave the section out."""

    id: str
    title: str
    render: Callable[[ReportContext], str | None]


SECTIONS: list[Section] = [
    Section("findings", "Findings", _findings),
    # Lag first: when one rank is late every rank's step is equally long (the others wait
    # for it), so the step-time heatmap is flat and only the lag shows who.
    Section(
        "lag-heatmap",
        "Arrival lag at collectives, rank x step",
        _heatmap_section("arrival lag", "ms", lambda c: c.lag_ms),
    ),
    Section(
        "step-time-heatmap",
        "Step time, rank x step",
        _heatmap_section("step time", "ms", lambda c: c.step_ms),
    ),
    Section("perfetto", "Open the merged trace in Perfetto", perfetto_section),
    Section("distributions", "Distributions across ranks", distributions),
    Section("breakdown", "Where the step goes, per rank", _small_job_only(breakdown_per_rank)),
    Section("step-times", "Step time per rank", _small_job_only(step_times)),
    Section("bandwidth", "Collective bandwidth against the fabric", bandwidth_section),
    Section("ranks", "Ranks", rank_detail),
    Section("details", "Details", _details),
    Section("gpu", "GPU counters and memory", lambda c: gpu_section(c.job) or None),
    Section("memory", "What the memory peak is made of", lambda c: memory_section(c.job)),
    Section("efficiency", "MFU, skipped steps and launches", lambda c: efficiency_section(c.job)),
    Section("critical-path", "The critical path of a step", lambda c: critical_path_section(c.job)),
    Section("notes", "Notes", _notes),
]
"""The report's sections in page order; a new figure is one more entry here."""


def _answer(context: ReportContext) -> str:
    """The top of the page: whose steps, the verdict with its confidence, the step."""
    job = context.job
    facts = " · ".join(origin_facts(job, context.origin, context.offline))
    calm = "" if job.findings and job.findings[0].severity.order >= 2 else " calm"
    return (
        f"<header><h1>{escape(report_title(job, context.origin, context.offline))}</h1>"
        f'<p class="origin">{escape(facts)}</p></header>'
        f'<section id="verdict"><p class="verdict{calm}">{escape(verdict_sentence(job))}</p>'
        f"{step_overview(job)}</section>"
    )


def render_report(
    job: JobSummary,
    merged: Mapping[int, Sequence[str]] | None = None,
    merged_selection: str = "",
    extra_section: str = "",
    origin: ReportOrigin | None = None,
) -> str:
    """The whole report page as an HTML string.

    `merged` maps the ranks whose full traces are in the merged trace to why they were
    chosen, and `merged_selection` is the selection's one-line description; the analysis
    Job knows both from its plan. `origin` names the target, session and capture time for
    the title (None: a folder analysed offline, named by its traces). `extra_section`
    (trusted HTML, e.g. the comparison `stepscope diff` makes) goes right after the verdict."""
    context = ReportContext(job, merged=merged, merged_selection=merged_selection, origin=origin)
    body = []
    for section in SECTIONS:
        html = section.render(context)
        if html is not None:
            body.append(
                f'<section id="{section.id}"><h2>{escape(section.title)}</h2>{html}</section>'
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(report_title(job, origin, context.offline))}</title>"
        f"<style>{STYLE}</style></head>"
        f"<body>{_answer(context)}{extra_section}" + "".join(body) + "</body></html>\n"
    )
