"""The README's trigger section and its plot are what the recorded real run renders to
(stepscope_dev.trigger_example over docs/examples/trigger-run/), the dashboard panel they name
queries series the agent serves today, and the recorded firing agrees with the recorded series.

The recording is of a real run (`python -m stepscope_dev.trigger_example --record`), so the
checks on it are checks of that run: the Event's band is recomputed from its own numbers with
the documented rule, the fired sample lies above it, and the step time the agents served before
and after the added compute sits where the Event says."""

from __future__ import annotations

import re
import statistics
import time

import pytest
from stepscope_agent import messages
from stepscope_agent.registry import RankLink
from stepscope_agent.step_metrics import LABEL_NAMES, STEP_DURATION, PodLabels, render_metrics
from stepscope_agent.stepping import StepCounter
from stepscope_dev.trigger_example import (
    PLOT,
    README,
    dashboard_panel,
    load_recording,
    plot_svg,
    section_lines,
    section_of,
)
from stepscope_dev.trigger_plot import Scrape, job_series, rank_series
from stepscope_dev.trigger_run import (
    METRICS_COLUMNS,
    TRAINER_ARGS,
    TRIGGER_MANIFEST,
    parse_step_duration,
)
from stepscope_operator.triggers.opening import REASON_ANNOTATION

from stepscope.api.trigger import ProfileTriggerSpec, TriggerEventReason, TriggerReason

RECORDING = load_recording()
# 1 / Phi^-1(3/4), the MAD's scale to a standard deviation, as the how-to page states the rule.
MAD_SCALE = 1.4826


def test_the_readme_section_is_what_the_recording_renders_to() -> None:
    current = section_lines(RECORDING)
    written = section_of(README.read_text(encoding="utf-8"))
    assert written == current, (
        "README.md's trigger section is not what the recorded run renders to; run "
        "`make docs-examples` (it rewrites the section with):\n" + "\n".join(current)
    )


def test_the_plot_is_what_the_plotting_code_draws_from_the_recorded_series() -> None:
    drawn = plot_svg(RECORDING)
    assert PLOT.read_text(encoding="utf-8") == drawn, "run `make docs-examples`"
    # One line per recorded rank, each with a point for every interval in which it stepped.
    series = rank_series(RECORDING.scrapes)
    assert sorted(series) == list(range(RECORDING.run["job"]["ranks"]))
    for rank, points in series.items():
        [line] = re.findall(rf'<polyline points="([^"]*)"[^>]*><title>rank {rank}</title>', drawn)
        assert len(line.split()) == len(points)


def test_the_recording_is_of_the_current_scenario() -> None:
    recorded = (RECORDING.run["trigger"], RECORDING.run["job"]["args"])
    assert recorded == (TRIGGER_MANIFEST, list(TRAINER_ARGS)), (
        "the scenario changed since the recording: run "
        "`python -m stepscope_dev.trigger_example --record`"
    )


def test_the_firing_was_judged_against_the_baseline_the_trigger_recorded() -> None:
    """What the README says of the baseline: the trigger recorded it while the job was
    healthy, the firing named it, an Event told the opened session's verdict against it, and
    the session's own verdict names the added compute."""
    run = RECORDING.run
    baseline, session = run["baselineSession"], run["session"]
    reasons = [e["reason"] for e in RECORDING.events]
    fired = reasons.index(TriggerReason.STEP_TIME_OUT_OF_BAND)
    [opened] = [e for e in RECORDING.events if e["reason"] == TriggerEventReason.BASELINE_OPENED]
    assert reasons.index(TriggerEventReason.BASELINE_OPENED) < fired
    assert f"opened ProfileSession {baseline} " in opened["message"]
    assert f"last good session {baseline}" in RECORDING.fired_event["message"]
    [compared] = [
        e for e in RECORDING.events if e["reason"] == TriggerEventReason.BASELINE_COMPARED
    ]
    assert reasons.index(TriggerEventReason.BASELINE_COMPARED) > fired
    assert compared["message"].startswith(f"session {session} ")
    assert f"last good session {baseline}: " in compared["message"]
    assert compared["message"] in RECORDING.trigger_text
    assert re.search(rf"^ +Session Ref: +{baseline}$", RECORDING.session_text, re.MULTILINE)
    assert re.search(r"^ +Bottleneck: +compute$", RECORDING.session_text, re.MULTILINE)


def _served_reply() -> str:
    """What a real agent serves for two ranks that stepped through the real step counter and
    reported over the real wire encoding."""
    counter = StepCounter(lambda record, next_step: None)
    for _ in range(3):
        counter.optimizer_stepped(counter)
    progress = messages.decode(messages.encode(counter.recent()))
    links = [
        RankLink(rank=r, local_rank=r, pid=r, torch_version=None, progress=progress)
        for r in range(2)
    ]
    labels = PodLabels.sanitised(namespace="ns", job_kind="PyTorchJob", job_name="j", pod="p")
    return render_metrics(labels, links, time.time()).decode()


def test_the_dashboard_panel_charts_the_scraped_series_per_rank() -> None:
    reply = _served_reply()
    served = {line.split("{", 1)[0] for line in reply.splitlines() if not line.startswith("#")}
    total, count = f"{STEP_DURATION}_sum", f"{STEP_DURATION}_count"
    # The recording kept exactly these two series, and the recorder still reads them.
    assert METRICS_COLUMNS[3:] == (total, count)
    assert {total, count} <= served
    parsed = parse_step_duration(reply)
    assert sorted(parsed) == [0, 1]
    assert all(set(v) == {total, count} and v[count] == 3 for v in parsed.values()), parsed
    panel = dashboard_panel()
    [target] = panel["targets"]
    query = target["expr"]
    # rate(_sum) / rate(_count), each rank its own series: no aggregation drops the rank.
    assert re.search(rf"rate\({total}\{{[^}}]*\}}\[[^\]]+\]\) / rate\({count}\{{", query), query
    assert not re.search(r"\b(sum|avg|max|min) by\b", query), query
    assert "{{rank}}" in target["legendFormat"]
    matched = set(re.findall(r"([a-z_]+)=~?\"", query))
    assert matched and matched <= set(LABEL_NAMES), matched
    assert "rank" in LABEL_NAMES


def _band_rule():
    return ProfileTriggerSpec.model_validate(RECORDING.run["trigger"]["spec"]).rules.step_time_band


def test_the_firing_event_states_a_band_its_sample_is_above() -> None:
    event = RECORDING.fired_event
    band = RECORDING.fired_band
    rule = _band_rule()
    assert event["type"] == "Warning" and RECORDING.run["session"] in event["message"]
    # The Event kubectl describe printed is the one recorded with its time.
    assert event["message"] in RECORDING.trigger_text
    assert (band.k, band.in_a_row) == (rule.mad_multiplier, rule.consecutive)
    assert rule.warmup_samples <= band.samples <= rule.window
    # The band's edge by the documented rule, from the Event's own median and MAD (printed to
    # 4 and 3 significant digits).
    edge = band.median_ms + max(
        band.k * band.scaled_mad_ms, band.median_ms * rule.min_rise_pct / 100
    )
    assert edge == pytest.approx(band.upper_ms, rel=2e-3, abs=0.06)
    assert band.measured_ms > band.upper_ms
    # The rise is computed before the times are printed to 4 digits.
    assert band.rise_pct == pytest.approx(100 * (band.measured_ms / band.median_ms - 1), abs=1)
    # The trigger's describe and the session's carry the same reason.
    assert TriggerReason.STEP_TIME_OUT_OF_BAND in RECORDING.trigger_text
    assert f"{REASON_ANNOTATION}: {TriggerReason.STEP_TIME_OUT_OF_BAND}" in RECORDING.session_text
    reasons = [e["reason"] for e in RECORDING.events]
    assert TriggerEventReason.COOLING_DOWN in reasons[reasons.index(event["reason"]) :]


def test_the_scraped_series_agrees_with_the_firing() -> None:
    run = RECORDING.run
    band = RECORDING.fired_band
    rule = _band_rule()
    interval = run["trigger"]["spec"]["intervalSeconds"]
    job = job_series(rank_series(RECORDING.scrapes), run["scrapeIntervalSeconds"])
    knob_at, fired_at = run["knobAt"], RECORDING.fired_at
    assert knob_at < fired_at
    # The trigger's window of samples before the compute was added, as the agents served it.
    before = [p.step_ms for p in job if knob_at - rule.window * interval <= p.time < knob_at]
    after = [p.step_ms for p in job if knob_at + interval <= p.time <= fired_at]
    assert len(before) >= rule.warmup_samples and after, (len(before), len(after))
    # The band recomputed from the scraped samples with the documented rule.
    median = statistics.median(before)
    mad = MAD_SCALE * statistics.median(abs(v - median) for v in before)
    edge = median + max(rule.mad_multiplier * mad, median * rule.min_rise_pct / 100)
    # Healthy, the job sat in that band; slowed, it left it, as the Event says it left its own.
    assert max(before) <= edge, (before, edge)
    assert min(after) > edge, (after, edge)
    # The Event's median and the sample it fired on are the step time the agents served then.
    assert median == pytest.approx(band.median_ms, rel=0.1)
    assert statistics.median(after) == pytest.approx(band.measured_ms, rel=0.1)
    assert after[-1] > band.upper_ms
    # The added compute is what moved it: four ranks share the machine's cores, so a step
    # may grow by more than the compute each rank added, never by much less. By how much more
    # depends on what else the machine ran (run.json's loadAverage and nice), so no upper bound.
    added = run["extraComputeMs"]
    assert added / 2 <= statistics.median(after) - median


def test_a_ranks_step_time_is_the_rate_of_its_sum_over_the_rate_of_its_count() -> None:
    # Rank 0 steps 6 times in 0.6 s, then not at all; rank 1 steps 3 times in 0.3 s each round.
    scrapes = [
        Scrape(100.0, "a", 0, 1.0, 10), Scrape(100.1, "b", 1, 2.0, 20),
        Scrape(102.5, "a", 0, 1.6, 16), Scrape(102.6, "b", 1, 2.3, 23),
        Scrape(105.0, "a", 0, 1.6, 16), Scrape(105.1, "b", 1, 2.6, 26),
    ]  # fmt: skip
    series = rank_series(scrapes)
    assert {r: [(p.time, round(p.step_ms, 6)) for p in ps] for r, ps in series.items()} == {
        0: [(102.5, 100.0)],
        1: [(102.6, 100.0), (105.1, 100.0)],
    }
    assert [(p.time, p.step_ms) for p in job_series(series, 2.5)] == [
        (102.5, pytest.approx(100.0)),
        (105.1, pytest.approx(100.0)),
    ]
