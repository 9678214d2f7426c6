"""The README's trigger section, rendered from a recording of a real run, never written by hand.

``--record`` runs the scenario (``trigger_run``: a ProfileTrigger watching a real 4-rank DDP
PyTorchJob on a real node, compute added mid-run) and keeps what real kubectl printed and what
the agents' ``/metrics`` served in docs/examples/trigger-run/. Without it, the section is
rendered from that recording: the trigger as applied, ``kubectl get profiletriggers``, excerpts
of ``kubectl describe`` for the trigger (its Events) and for the session it opened (its verdict,
its comparison with the baseline the trigger recorded, and its Events), and the plot of the
scraped step time (docs/images/trigger-step-time.svg) beside the dashboard panel that charts
the same series, with its PromQL read from the chart's dashboard JSON. `make docs-examples`
renders; tests/unit/harness/test_trigger_example.py renders again and fails when the README or
the plot differs.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from stepscope.api.trigger import TriggerReason
from stepscope_dev.describe_example import README, excerpt
from stepscope_dev.trigger_plot import Marks, Scrape, rank_series, step_time_svg
from stepscope_dev.trigger_run import (
    EVENTS_FILE,
    GET_FILE,
    METRICS_COLUMNS,
    METRICS_FILE,
    RUN_FILE,
    SESSION_FILE,
    TRIGGER_FILE,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDING = REPO_ROOT / "docs" / "examples" / "trigger-run"
PLOT = REPO_ROOT / "docs" / "images" / "trigger-step-time.svg"
DASHBOARD = REPO_ROOT / "charts" / "stepscope" / "files" / "grafana" / "step-time-dashboard.json"
# The dashboard's panel that draws each rank's step time, the series the plot shows.
PANEL = "Slowest ranks (mean step time)"
BEGIN = (
    "<!-- trigger-example: make docs-examples writes this section from a recorded run; "
    "a test checks it -->"
)
END = "<!-- trigger-example: end -->"
# The README's prose lines are wrapped at this many characters.
PROSE_WIDTH = 99

# What the README keeps of each describe output (see describe_example.excerpt).
TRIGGER_KEPT: tuple[tuple[str, ...], ...] = (
    ("Name",),
    ("Namespace",),
    ("Status", "Last Fired"),
    ("Events",),
)
SESSION_KEPT: tuple[tuple[str, ...], ...] = (
    ("Name",),
    ("Namespace",),
    ("Metadata", "Owner References"),
    ("Spec", "Baseline"),
    ("Status", "Baseline Comparison", "Step Time Delta Pct"),
    ("Status", "Baseline Comparison", "Verdict"),
    ("Status", "Phase"),
    ("Status", "Summary", "Bottleneck"),
    ("Status", "Summary", "Breakdown"),
    ("Status", "Summary", "Step Time"),
    ("Status", "Target"),
    ("Status", "Window", "Range"),
    ("Events",),
)

# The band the trigger's Event states (bands.Band.describe, StepTimeBand.observe).
FIRED = re.compile(
    r"step time (?P<measured>[\d.]+) ms is (?P<rise>[+-]\d+)% against the median, above its "
    r"band (?P<upper>[\d.]+) ms = median (?P<median>[\d.]+) ms \+ max\((?P<k>[\d.]+) x MAD "
    r"(?P<mad>[\d.e+-]+) ms, floor\) over (?P<samples>\d+) samples, for (?P<run>\d+) samples "
    r"in a row"
)


@dataclass(frozen=True)
class FiredBand:
    """The numbers of the firing Event: the sample, and the band it was above (ms)."""

    measured_ms: float
    rise_pct: int
    upper_ms: float
    median_ms: float
    k: float
    scaled_mad_ms: float
    samples: int
    in_a_row: int

    @classmethod
    def parse(cls, message: str) -> FiredBand:
        match = FIRED.search(message)
        if match is None:
            raise ValueError(f"the firing Event does not state its band: {message!r}")
        return cls(
            float(match["measured"]), int(match["rise"]), float(match["upper"]),
            float(match["median"]), float(match["k"]), float(match["mad"]),
            int(match["samples"]), int(match["run"]),
        )  # fmt: skip


@dataclass(frozen=True)
class Recording:
    """One recorded run (trigger_run), as its files hold it."""

    run: dict[str, Any]
    get_text: str
    trigger_text: str
    session_text: str
    events: list[dict[str, Any]]
    scrapes: list[Scrape]

    @property
    def fired_event(self) -> dict[str, Any]:
        return next(e for e in self.events if e["reason"] == TriggerReason.STEP_TIME_OUT_OF_BAND)

    @property
    def fired_band(self) -> FiredBand:
        return FiredBand.parse(self.fired_event["message"])

    @property
    def fired_at(self) -> float:
        return datetime.fromisoformat(self.run["firedAt"]).timestamp()

    @property
    def session_window(self) -> tuple[float, float]:
        """When the opened session's window began and ended, as its status says."""
        times = []
        for key in ("Start Time", "End Time"):
            [moment] = re.findall(rf"^ +{key}: +(\S+)$", self.session_text, re.MULTILINE)
            times.append(datetime.fromisoformat(moment).timestamp())
        return times[0], times[1]


def load_recording(folder: Path = RECORDING) -> Recording:
    with (folder / METRICS_FILE).open(encoding="utf-8") as rows:
        reader = csv.reader(rows)
        if tuple(next(reader)) != METRICS_COLUMNS:
            raise ValueError(f"{folder / METRICS_FILE}: its columns are not {METRICS_COLUMNS}")
        scrapes = [Scrape(float(t), pod, int(r), float(s), float(c)) for t, pod, r, s, c in reader]
    return Recording(
        run=json.loads((folder / RUN_FILE).read_text(encoding="utf-8")),
        get_text=(folder / GET_FILE).read_text(encoding="utf-8"),
        trigger_text=(folder / TRIGGER_FILE).read_text(encoding="utf-8"),
        session_text=(folder / SESSION_FILE).read_text(encoding="utf-8"),
        events=json.loads((folder / EVENTS_FILE).read_text(encoding="utf-8")),
        scrapes=scrapes,
    )


def plot_svg(recording: Recording) -> str:
    """The plot of the recorded step time, with the compute change, the firing and the band."""
    band = recording.fired_band
    marks = Marks(
        knob_at=recording.run["knobAt"],
        knob_label=f"+{recording.run['extraComputeMs']} ms compute",
        fired_at=recording.fired_at,
        fired_label="trigger fired",
        band_median_ms=band.median_ms,
        band_upper_ms=band.upper_ms,
        window=recording.session_window,
        window_label="the session's window",
    )
    return step_time_svg(rank_series(recording.scrapes), marks)


def dashboard_panel(dashboard: Path = DASHBOARD) -> dict[str, Any]:
    """The dashboard's panel that charts each rank's step time."""
    panels = json.loads(dashboard.read_text(encoding="utf-8"))["panels"]
    return next(p for p in panels if p["title"] == PANEL)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def _prose(text: str) -> list[str]:
    return textwrap.wrap(text, PROSE_WIDTH, break_long_words=False, break_on_hyphens=False)


def _fenced(command: str | None, lines: Sequence[str], language: str = "") -> list[str]:
    head = [f"$ {command}"] if command else []
    return [f"```{language}", *head, *lines, "```"]


def section_lines(recording: Recording) -> list[str]:
    """The README's trigger section between its markers, from ``recording``."""
    run = recording.run
    trigger = run["trigger"]
    name = trigger["metadata"]["name"]
    spec = trigger["spec"]
    session = run["session"]
    [query] = [t["expr"] for t in dashboard_panel()["targets"]]
    plot = PLOT.relative_to(REPO_ROOT)
    data = (RECORDING / METRICS_FILE).relative_to(REPO_ROOT)
    dashboard = DASHBOARD.relative_to(REPO_ROOT)
    recorded_on = run["recordedAt"][:10]
    return [
        *_prose(
            "A `ProfileTrigger` watches the step progress of the jobs it names, through the same "
            "agents, and opens a session by itself when a job's step time leaves its band, a "
            "straggler appears, the job stops or it waits for data "
            "([Open sessions automatically](docs/how-to/open-sessions-automatically.md))."
        ),
        "",
        *_prose(
            f"A real run: a {run['job']['ranks']}-rank DDP PyTorchJob `{run['job']['name']}` "
            "under the Kubeflow training operator on a real node, the operator installed from "
            f"its chart, and this trigger sampling the job every {spec['intervalSeconds']} s. "
            "Once the band was warm, the trigger recorded a baseline session of the healthy "
            f"job; then each rank's step got {run['extraComputeMs']} ms more compute (matrix "
            "products, timed at the fastest one product ran). The four ranks share the "
            f"machine's cores with whatever else it runs (the run at nice {run['nice']}), so a "
            "step grew by far more than that. "
            f"`{run['command']}` ran it on a {run['machine']} on {recorded_on} and kept what "
            "kubectl printed and what the agents served; `make docs-examples` renders this "
            "section from that recording, and a test checks it."
        ),
        "",
        *_fenced(None, _lines(yaml.safe_dump(trigger, sort_keys=False)), "yaml"),
        "",
        *_fenced("kubectl get profiletriggers", _lines(recording.get_text)),
        "",
        *_prose(
            "The trigger's Events say that it recorded the baseline, what moved, by how much, "
            "against what band, what the session it opened found against the baseline, and that "
            "the cooldown held the next firing (an excerpt; `...` marks lines left out):"
        ),
        "",
        *_fenced(
            f"kubectl describe profiletrigger {name}",
            excerpt(_lines(recording.trigger_text), TRIGGER_KEPT),
        ),
        "",
        *_prose(
            "The session it opened is owned by the trigger, names the baseline in "
            "`spec.baseline.sessionRef`, carries the same Events, and profiles the job like any "
            "other: its own verdict (the bottleneck) and its comparison with the baseline:"
        ),
        "",
        *_fenced(
            f"kubectl describe profilesession {session}",
            excerpt(_lines(recording.session_text), SESSION_KEPT),
        ),
        "",
        f"![Step time per rank during the run]({plot})",
        "",
        *_prose(
            "Each rank's step time as the agents served it on `/metrics`, scraped every "
            f"{run['scrapeIntervalSeconds']:g} s through the run ([{data}]({data})), with the "
            "band the Event stated; the shaded steps are the session's profiled window. It is "
            f"the series the chart's Grafana dashboard ([{dashboard.name}]({dashboard}), "
            f'`grafana.dashboard.enabled`) draws in its panel "{PANEL}":'
        ),
        "",
        *_fenced(None, [query], "promql"),
    ]


def section_of(text: str) -> list[str]:
    """The README's lines between the trigger section's markers."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"README.md lost the trigger section's markers {BEGIN!r} / {END!r}")
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return body.strip("\n").split("\n")


def with_section(text: str, lines: Sequence[str]) -> str:
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return "\n".join([head + BEGIN, *lines, END]) + tail


def render(check: bool, readme: Path = README, plot: Path = PLOT) -> int:
    """Rewrite the README's section and the plot from the recording, unless current; with
    ``check``, only say whether they are. The exit status: 1 when stale under ``check``."""
    recording = load_recording()
    stale = 0
    text = readme.read_text(encoding="utf-8")
    lines = section_lines(recording)
    if section_of(text) != lines:
        stale = 1
        if not check:
            readme.write_text(with_section(text, lines), encoding="utf-8")
    svg = plot_svg(recording)
    if not plot.exists() or plot.read_text(encoding="utf-8") != svg:
        stale = 1
        if not check:
            plot.parent.mkdir(parents=True, exist_ok=True)
            plot.write_text(svg, encoding="utf-8")
    if check and stale:
        print("README.md's trigger section or its plot is stale; run `make docs-examples`")
        return 1
    print("README.md's trigger section and its plot " + ("rewritten" if stale else "are current"))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--record",
        action="store_true",
        help="run the scenario on a real node first (minutes; `make node-images` built its images)",
    )
    parser.add_argument("--check", action="store_true", help="fail if README.md is not current")
    args = parser.parse_args(argv)
    if args.record:
        from stepscope_dev.trigger_run import record

        record(RECORDING)
    return render(args.check)


if __name__ == "__main__":
    sys.exit(main())
