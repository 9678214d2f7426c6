"""The report as a person sees it, in a real headless Chromium (support.browser).

Reports of recorded scenarios, written by the real analysis, are opened at 1280x800 and read
through what the browser renders: the verdict sentence lands on the first screen, the title
names the job, the arrival-lag heatmap comes before the step-time one, no internal key shows,
the Perfetto steps are there, and tenant-controlled names (pods, nodes, the target) show as
text while the page loads nothing and runs nothing. Without Chromium these tests fail, saying
that `make browser` installs it.
"""

from __future__ import annotations

import json
import re
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest
from stepscope_dev.report_picture import HEIGHT, PICTURE, WIDTH, write_picture
from support.browser import Browser, BrowserError, Page, chromium_path

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.analysis.reports.html import render_report
from stepscope.analysis.reports.origin import ReportOrigin
from stepscope.cli.analyze import analyze
from stepscope.cli.diff import run_diff

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
FIRST_SCREEN_PX = 800
# Each would run if it were markup rather than text; each also sets a mark a test reads.
HOSTILE_POD = '<script>window.pwned = "pod"</script><img src=x onerror="window.pwned=1">worker-2'
HOSTILE_NODE = '"><svg onload="window.pwned = 2"></svg>node-b'
HOSTILE_TARGET = "PyTorchJob team-a/llama</title><script>window.pwned = 3</script>"
STRAGGLER_VERDICT = re.compile(
    r"Rank 2 \(pod .*worker-2 on node .*node-b\) is a straggler: it reaches collectives "
    r"\d+\.\d ms \(\d+% of the step\) after the median rank; confidence 0\.\d\d\."
)
LAG_HEADING = "Arrival lag at collectives, rank x step"
STEP_HEADING = "Step time, rank x step"
PERFETTO_HEADING = "Open the merged trace in Perfetto"
MAX_PICTURE_BYTES = 300 * 1024


@pytest.fixture(scope="module")
def browser():
    try:
        with Browser(WIDTH, HEIGHT) as opened:
            yield opened
    except BrowserError as error:
        pytest.fail(str(error))


@pytest.fixture(scope="module")
def straggler_out(tmp_path_factory) -> Path:
    """The straggler scenario analysed as `stepscope analyze --placement` does, with a pod
    and a node name a hostile tenant could choose."""
    work = tmp_path_factory.mktemp("straggler")
    placement = work / "placement.json"
    nodes = {0: "node-a", 1: "node-a", 2: HOSTILE_NODE, 3: HOSTILE_NODE}
    pods = {rank: f"worker-{rank}" for rank in nodes} | {2: HOSTILE_POD}
    placement.write_text(
        json.dumps({str(r): {"pod": pods[r], "node": nodes[r]} for r in nodes}), "utf-8"
    )
    ((out, job),) = analyze(str(SCENARIOS / "straggler"), work / "out", placement)
    assert job.straggler is not None and job.straggler.rank == 2
    assert job.slow_node is None, "only rank 2 of its node is late"
    return out


def answer_box(page: Page, needle: str) -> dict[str, float]:
    box = page.text_box(needle)
    assert box is not None, f"{needle!r} is not rendered visibly"
    return box


def assert_answers_first(page: Page, verdict: re.Pattern[str], job: JobSummary) -> str:
    """The verdict in the first screen, the lag heatmap above the step-time one, the
    Perfetto steps visible, no key of the findings' numbers shown (they are summary.json's);
    returns the page's visible text."""
    text = page.visible_text()
    sentence = verdict.search(text)
    assert sentence, f"no verdict matching {verdict.pattern!r} in:\n{text[:1500]}"
    box = answer_box(page, sentence.group(0)[-40:])
    assert box["bottom"] <= FIRST_SCREEN_PX, f"the verdict ends at {box['bottom']} px"
    assert page.evaluate("innerWidth") == WIDTH
    assert answer_box(page, LAG_HEADING)["top"] < answer_box(page, STEP_HEADING)["top"]
    assert answer_box(page, PERFETTO_HEADING)
    for step in ("ui.perfetto.dev", "Open trace file", "merged.trace.json.gz"):
        assert answer_box(page, step), step
    keys = {key for finding in job.findings for key in finding.evidence.numbers}
    assert keys, "the job has findings with numbers"
    shown = {key for key in keys if f"{key}=" in text or ("_" in key and key in text)}
    assert not shown, f"internal keys shown: {sorted(shown)}"
    return text


def assert_ran_and_fetched_nothing(page: Page, report: Path) -> None:
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.evaluate("document.scripts.length") == 0
    assert page.evaluate("document.querySelectorAll('img, iframe, object, embed').length") == 0
    assert page.requests == [report.resolve().as_uri()], "the page fetched something"
    assert (page.exceptions, page.console, page.blocked) == ([], [], [])


def test_the_straggler_report_answers_on_the_first_screen(browser, straggler_out):
    report = straggler_out / "report.html"
    job = JobSummary.model_validate_json((straggler_out / "summary.json").read_text())
    page = browser.open(report)
    text = assert_answers_first(page, STRAGGLER_VERDICT, job)
    assert page.evaluate("document.title") == "straggler: stepscope report"
    assert answer_box(page, "straggler: stepscope report")["bottom"] <= FIRST_SCREEN_PX
    assert re.search(r"traces in folder straggler · 4 ranks · window steps \d+–\d+", text)
    assert answer_box(page, "Step time ")["bottom"] <= FIRST_SCREEN_PX
    assert "median_lag_ms" in job.findings[0].evidence.numbers
    assert "median_lag_ms" not in text and "confidence 0.99" in text and "µs" in text


def test_hostile_pod_and_node_names_show_as_text_and_run_nothing(browser, straggler_out):
    report = straggler_out / "report.html"
    page = browser.open(report)
    text = page.visible_text()
    assert HOSTILE_POD in text and HOSTILE_NODE in text
    assert_ran_and_fetched_nothing(page, report)


def test_a_sessions_report_names_its_target_session_and_capture_time(
    browser, straggler_out, tmp_path
):
    job = JobSummary.model_validate_json((straggler_out / "summary.json").read_text())
    origin = ReportOrigin(
        target=HOSTILE_TARGET,
        session="team-a/llama-ft-1",
        captured_at=datetime(2026, 12, 2, 14, 3, 30, tzinfo=UTC),
    )
    report = tmp_path / "report.html"
    merged = {0: ["rank 0"], 2: ["straggler"]}
    report.write_text(render_report(job, merged, "full traces of ranks 0 and 2", origin=origin))
    page = browser.open(report)
    text = assert_answers_first(page, STRAGGLER_VERDICT, job)
    assert page.evaluate("document.title") == f"{HOSTILE_TARGET}: stepscope report"
    assert answer_box(page, HOSTILE_TARGET)["bottom"] <= FIRST_SCREEN_PX
    assert "session team-a/llama-ft-1 · captured 2026-12-02 14:03 UTC · 4 ranks" in text
    assert answer_box(page, "stepscope artifacts llama-ft-1 -n team-a --open trace")
    assert_ran_and_fetched_nothing(page, report)


def test_a_session_without_a_stored_trace_says_there_is_none_to_open(
    browser, straggler_out, tmp_path
):
    job = JobSummary.model_validate_json((straggler_out / "summary.json").read_text())
    report = tmp_path / "report.html"
    report.write_text(render_report(job, {}, origin=ReportOrigin(session="team-a/llama-ft-1")))
    page = browser.open(report)
    assert answer_box(page, "No merged trace was built for this session")
    assert page.text_box("Open trace file") is None
    assert page.evaluate("document.title") == "team-a/llama-ft-1: stepscope report"


def test_the_balanced_report_answers_without_naming_a_straggler(browser, tmp_path):
    ((out, job),) = analyze(str(SCENARIOS / "balanced"), tmp_path / "out")
    assert job.straggler is None and job.findings
    page = browser.open(out / "report.html")
    top = re.escape(job.findings[0].title)
    verdict = re.compile(rf"{top} \(\d+% of the step\); confidence 0\.\d\d\.")
    text = assert_answers_first(page, verdict, job)
    assert "is a straggler" not in text
    assert page.evaluate("document.title") == "balanced: stepscope report"
    assert_ran_and_fetched_nothing(page, out / "report.html")


def test_the_diff_report_keeps_the_answer_first_and_the_comparison_next(browser, tmp_path):
    before, after = str(SCENARIOS / "balanced"), str(SCENARIOS / "straggler")
    run_diff(before, after, tmp_path / "diff", threshold_pct=1.0)
    job = JobSummary.model_validate_json((tmp_path / "diff" / "b" / "summary.json").read_text())
    page = browser.open(tmp_path / "diff" / "report.html")
    verdict = re.compile(r"Rank 2 is a straggler: .*; confidence 0\.\d\d\.")
    assert_answers_first(page, verdict, job)
    against = answer_box(page, f"Against {before}")
    assert answer_box(page, "is a straggler")["bottom"] < against["top"]
    assert against["top"] < answer_box(page, "Findings")["top"]


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


def test_the_readme_picture_is_the_first_screen_of_the_straggler_report(tmp_path):
    drawn = write_picture(tmp_path / "report.png")
    assert _png_size(drawn) == (WIDTH, HEIGHT)
    assert drawn.stat().st_size < MAX_PICTURE_BYTES
    assert PICTURE.is_file(), "no docs/images/report.png: run `make docs-examples`"
    assert _png_size(PICTURE) == (WIDTH, HEIGHT)
    assert PICTURE.stat().st_size < MAX_PICTURE_BYTES


def test_a_missing_chromium_is_an_error_that_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrowserError, match="make browser"):
        chromium_path()
