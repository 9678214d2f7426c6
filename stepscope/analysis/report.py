"""Render a job summary as one self-contained HTML page.

Everything is inline (CSS and SVG, no scripts, no fonts or CDNs) so the page
opens from S3, an email attachment or an air-gapped cluster alike.
"""

from __future__ import annotations

from html import escape

from stepscope.analysis.job_model import Finding, JobSummary
from stepscope.analysis.report_plots import CATEGORY_LABELS, breakdown_per_rank, step_times
from stepscope.analysis.summary_model import Breakdown

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.finding { border-left: 4px solid #bbb; padding: 0.4rem 0.8rem; margin: 0.8rem 0; }
.finding.high { border-color: #d62728; } .finding.medium { border-color: #ff7f0e; }
.finding.low { border-color: #e6c200; } .finding.info { border-color: #1f77b4; }
.badge { font-size: 0.75rem; text-transform: uppercase; font-weight: 600; margin-right: 0.5rem; }
.muted { color: #666; font-size: 0.85rem; }
.facts td { text-align: left; }
"""


def _facts(job: JobSummary) -> str:
    straggler = "none"
    if job.straggler:
        lag = job.straggler
        straggler = (
            f"rank {lag.rank} (+{lag.excess_ms:.1f} ms per collective, z {lag.robust_z:.1f}, "
            f"clearly last in {lag.last_arrival_fraction:.0%} of steps)"
        )
    if job.slow_node:
        straggler += f"; slow node {job.slow_node.node} (ranks {job.slow_node.ranks})"
    alignment = "not aligned (single rank or no shared collectives)"
    if job.alignment:
        alignment = (
            f"{job.alignment.matched_collectives} collectives matched by "
            f"{job.alignment.match_key}; residual median {job.alignment.residual_median_abs_us:.0f}"
            f" us, p90 {job.alignment.residual_p90_abs_us:.0f} us"
        )
    imbalance = f"{job.load_imbalance:.1%}" if job.load_imbalance is not None else "n/a"
    rows = [
        ("Ranks", str(job.world_size)),
        ("Common steps", ", ".join(map(str, job.common_steps)) or "none"),
        ("Median step time", f"{job.median_step_ms:.2f} ms"),
        ("Bottleneck", _bottleneck_text(job)),
        ("Straggler", straggler),
        ("Load imbalance (median over steps)", imbalance),
        ("Alignment", alignment),
    ]
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts">{body}</table>'


def _bottleneck_text(job: JobSummary) -> str:
    text = job.bottleneck.replace("_", " ")
    return f"{text} ({job.bottleneck_reason})" if job.bottleneck_reason else text


def _finding(finding: Finding) -> str:
    numbers = ", ".join(f"{k}={v:g}" for k, v in finding.evidence.numbers.items())
    return (
        f'<div class="finding {finding.severity.value}">'
        f'<div><span class="badge">{finding.severity.value}</span>'
        f"<strong>{escape(finding.title)}</strong> "
        f'<span class="muted">[{escape(finding.id)}, confidence {finding.confidence:.2f}]</span>'
        f"</div><p>{escape(finding.evidence.text)}</p>"
        f'<p class="muted">{escape(numbers)}</p>'
        f"<p><em>Recommendation:</em> {escape(finding.recommendation)}</p></div>"
    )


def _rank_table(job: JobSummary) -> str:
    arrivals = {a.rank: a for a in job.arrivals}
    offsets = job.offsets_us
    header = (
        "<tr><th>rank</th><th>step ms</th>"
        + "".join(f"<th>{escape(label)} %</th>" for label in CATEGORY_LABELS.values())
        + "<th>overlapped comm %</th><th>arrival lag ms</th><th>z</th><th>offset us</th></tr>"
    )
    rows = []
    for rank, breakdown in sorted(job.rank_breakdowns.items()):
        arrival = arrivals.get(rank)
        cells = [f"{rank}", f"{breakdown.total_ms:.2f}"]
        cells += [f"{breakdown.percent(category):.1f}" for category in Breakdown.CATEGORIES]
        cells.append(f"{breakdown.percent('comm_overlapped_ms'):.1f}")
        cells += (
            [f"{arrival.median_lag_ms:.2f}", f"{arrival.robust_z:.1f}"] if arrival else ["", ""]
        )
        cells.append(f"{offsets.get(rank, 0.0):.1f}")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table>{header}{''.join(rows)}</table>"


def render_report(job: JobSummary, extra_section: str = "") -> str:
    """The whole report page as an HTML string; `extra_section` (trusted HTML, e.g. the
    comparison `stepscope diff` makes) goes right after the facts."""
    findings = (
        "".join(_finding(f) for f in job.findings) or "<p>No findings: nothing stands out.</p>"
    )
    notes = "".join(f"<li>{escape(note)}</li>" for note in job.notes)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>stepscope report: {job.world_size} ranks</title><style>{STYLE}</style></head>"
        f"<body><h1>stepscope report: {job.world_size} rank(s)</h1>{_facts(job)}{extra_section}"
        f"<h2>Findings</h2>{findings}"
        f"<h2>Where the step goes, per rank</h2>{breakdown_per_rank(job)}"
        f"<h2>Step time per rank</h2>{step_times(job)}"
        f"<h2>Ranks</h2>{_rank_table(job)}"
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
        + "</body></html>\n"
    )
