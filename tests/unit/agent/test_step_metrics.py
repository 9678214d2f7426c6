"""The sidecar's /metrics reply: the text format read back by Prometheus's own parser, the
numbers the ranks reported, and every tenant-controlled part bounded: label values, ranks,
numbers, the reply's size."""

from __future__ import annotations

import math
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from stepscope_agent import messages
from stepscope_agent.registry import RankLink
from stepscope_agent.step_metrics import (
    DATA_WAIT,
    HOOK,
    LABEL_NAMES,
    LABEL_VALUE_MAX_CHARS,
    MAX_RANK,
    MAX_RANKS_PER_POD,
    MAX_REPLY_BYTES,
    RANKS_NOT_EXPORTED,
    SINCE_LAST_STEP,
    STEP_DURATION,
    STEPS,
    PodLabels,
    ScrapeCache,
    escape_label_value,
    render_metrics,
    sanitise_label_value,
)
from stepscope_agent.step_totals import BUCKET_COUNT, STEP_SECONDS_BUCKETS, StepTotals

NOW = 1_800_000_000.0
LABELS = PodLabels.sanitised(
    namespace="team-a", job_kind="PyTorchJob", job_name="bert", pod="bert-worker-1", node="n7"
)


def reported(totals: StepTotals, last_step_at: float | None = NOW - 2.0) -> messages.Progress:
    """A progress report as it arrives from a trainer: through the wire encoding."""
    buckets, step_s, wait_s, hook_s = totals.snapshot()
    progress = messages.Progress(
        global_step=totals.steps,
        last_step_at=last_step_at,
        step_buckets=buckets,
        step_seconds_total=step_s,
        data_wait_seconds_total=wait_s,
        hook_seconds_total=hook_s,
    )
    return messages.decode(messages.encode(progress))


def link(rank: int, progress: messages.Progress | None = None, connected_at=NOW - 60.0):
    return RankLink(
        rank=rank,
        local_rank=rank,
        pid=1000 + rank,
        torch_version=None,
        progress=progress,
        connected_at=connected_at,
    )


def parse(reply: bytes) -> dict[str, list]:
    """Samples by name, as Prometheus reads them."""
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(reply.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def by_rank(samples: list) -> dict[str, float]:
    return {s.labels["rank"]: s.value for s in samples}


def test_the_reply_holds_each_ranks_histogram_and_counters_as_reported():
    fast, slow = StepTotals(), StepTotals()
    for _ in range(10):
        fast.add(0.08, 0.01, 0.000004)
    for duration in (0.4, 0.4, 3.0):
        slow.add(duration, 0.2, 0.000005)
    reply = render_metrics(LABELS, [link(1, reported(slow)), link(0, reported(fast))], NOW)
    samples = parse(reply)

    assert by_rank(samples[STEPS]) == {"0": 10, "1": 3}
    assert by_rank(samples[STEP_DURATION + "_count"]) == {"0": 10, "1": 3}
    assert by_rank(samples[STEP_DURATION + "_sum"]) == pytest.approx({"0": 0.8, "1": 3.8})
    assert by_rank(samples[DATA_WAIT]) == pytest.approx({"0": 0.1, "1": 0.6})
    assert by_rank(samples[HOOK]) == pytest.approx({"0": 4e-5, "1": 1.5e-5})
    assert by_rank(samples[SINCE_LAST_STEP]) == {"0": 2.0, "1": 2.0}
    buckets = {
        (s.labels["rank"], s.labels["le"]): s.value for s in samples[STEP_DURATION + "_bucket"]
    }
    assert len(buckets) == 2 * BUCKET_COUNT
    # Cumulative, as the format wants: every step of rank 1 is within 5 s, two within 0.5 s.
    assert buckets[("1", "0.3")] == 0
    assert buckets[("1", "0.5")] == 2
    assert buckets[("1", "2.5")] == 2
    assert buckets[("1", "5.0")] == 3
    assert buckets[("1", "+Inf")] == 3
    assert buckets[("0", "0.05")] == 0 and buckets[("0", "0.1")] == 10
    assert samples[RANKS_NOT_EXPORTED][0].value == 0


def test_every_series_carries_exactly_the_fixed_labels():
    reply = render_metrics(LABELS, [link(0, reported(StepTotals()))], NOW)
    for name, samples in parse(reply).items():
        for sample in samples:
            names = set(sample.labels) - {"le"}
            expected = set(LABEL_NAMES) - ({"rank"} if name == RANKS_NOT_EXPORTED else set())
            assert names == expected, sample
            assert sample.labels["namespace"] == "team-a"
            assert sample.labels["job_kind"] == "PyTorchJob"
            assert sample.labels["node"] == "n7"


def test_a_rank_before_its_first_step_reports_the_time_since_it_connected():
    quiet = link(3, None, connected_at=NOW - 42.5)
    future = link(4, reported(StepTotals(), last_step_at=NOW + 100.0))
    samples = parse(render_metrics(LABELS, [quiet, future], NOW))
    assert by_rank(samples[SINCE_LAST_STEP]) == {"3": 42.5, "4": 0.0}
    # Nothing else is known of a rank that sent no report yet.
    assert by_rank(samples.get(STEPS, [])) == {"4": 0}


HOSTILE_VALUES = [
    "x" * 10_000,
    'team\nnamespace="kube-system"} 1\n# evil',
    'quoted "value" with \\ backslash',
    "caf\udcc3\udca9-not-utf8",  # an undecodable environment value, as Python passes it
    "ümlaut-ñame",
    "",
    None,
]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_a_hostile_label_value_becomes_a_short_kubernetes_name(value):
    cleaned = sanitise_label_value(value)
    assert len(cleaned) <= LABEL_VALUE_MAX_CHARS
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in cleaned), cleaned
    labels = PodLabels.sanitised(
        namespace=value, job_kind=value, job_name=value, pod=value, node=value
    )
    [sample] = parse(render_metrics(labels, [link(0)], NOW))[SINCE_LAST_STEP]
    assert sample.labels["pod"] == cleaned and sample.labels["namespace"] == cleaned


def test_cleaned_values_stay_apart_and_a_valid_name_is_kept():
    assert sanitise_label_value("bert-worker-0.team_a") == "bert-worker-0.team_a"
    hostile = ["team a", "team_a", "team\na", "x" * 100, "x" * 101, "x" * 63 + "y"]
    cleaned = [sanitise_label_value(v) for v in hostile]
    assert len(set(cleaned)) == len(hostile), cleaned
    assert cleaned[1] == "team_a"


@pytest.mark.parametrize("value", ['a"b', "a\\b", "a\nb", '\\"\n\\n', "plain"])
def test_escaped_label_values_read_back_unchanged(value):
    text = f'm{{l="{escape_label_value(value)}"}} 1\n'
    [family] = text_string_to_metric_families(text)
    assert family.samples[0].labels["l"] == value


def test_ten_thousand_ranks_export_a_bounded_few_and_count_the_rest():
    totals = StepTotals()
    totals.add(0.2, 0.0, 0.0)
    links = [link(rank, reported(totals)) for rank in range(10_000)]
    links += [link(-1), link(MAX_RANK + 1), link(2**63)]
    samples = parse(render_metrics(LABELS, links, NOW))
    assert sorted(by_rank(samples[STEPS]), key=int) == [str(r) for r in range(MAX_RANKS_PER_POD)]
    assert samples[RANKS_NOT_EXPORTED][0].value == len(links) - MAX_RANKS_PER_POD


def test_numbers_a_trainer_should_never_send_leave_their_series_out():
    bad = messages.Progress(
        global_step=1,
        last_step_at=math.nan,
        step_buckets=[1] * (BUCKET_COUNT + 1),
        step_seconds_total=1.0,
        data_wait_seconds_total=-1.0,
        hook_seconds_total=math.inf,
    )
    worse = messages.Progress(
        global_step=1,
        step_buckets=[True] + [0] * (BUCKET_COUNT - 1),
        step_seconds_total=math.nan,
        data_wait_seconds_total=2**60,
        hook_seconds_total=0.5,
    )
    huge = messages.Progress(
        global_step=1, step_buckets=[2**53] * BUCKET_COUNT, step_seconds_total=1.0
    )
    reply = render_metrics(LABELS, [link(0, bad), link(1, worse), link(2, huge)], NOW)
    samples = parse(reply)
    assert STEPS not in samples and STEP_DURATION + "_count" not in samples
    assert DATA_WAIT not in samples
    assert by_rank(samples[HOOK]) == {"1": 0.5}
    # A NaN last step falls back to the time since the rank connected.
    assert by_rank(samples[SINCE_LAST_STEP])["0"] == 60.0


def test_the_reply_stays_under_its_bound_with_every_part_at_its_longest():
    longest = "x" * 10_000
    labels = PodLabels.sanitised(
        namespace=longest, job_kind=longest, job_name=longest, pod=longest, node=longest
    )
    totals = StepTotals()
    for bound in STEP_SECONDS_BUCKETS:
        totals.add(bound, 0.0, 0.0)
    progress = messages.Progress(
        global_step=1,
        last_step_at=1.2345678901234567e-300,
        step_buckets=[2**53 // BUCKET_COUNT] * BUCKET_COUNT,
        step_seconds_total=1.2345678901234567e300,
        data_wait_seconds_total=1.2345678901234567e300,
        hook_seconds_total=1.2345678901234567e300,
    )
    links = [link(MAX_RANK - r, progress) for r in range(10_000)]
    reply = render_metrics(labels, links, NOW)
    assert len(parse(reply)[STEPS]) == MAX_RANKS_PER_POD
    assert len(reply) <= MAX_REPLY_BYTES


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_scrapes_within_the_cache_age_share_one_render():
    clock = Clock()
    rendered = []
    cache = ScrapeCache(lambda: str(len(rendered.append(1) or rendered)).encode(), 1.0, clock)
    assert [cache.reply() for _ in range(50)] == [b"1"] * 50
    clock.now += 0.99
    assert cache.reply() == b"1"
    clock.now += 0.01
    assert cache.reply() == b"2"
    assert cache.renders == 2


def test_a_storm_of_concurrent_scrapes_renders_once():
    started = threading.Event()

    def slow_render() -> bytes:
        started.set()
        time.sleep(0.2)  # a render long enough that every scraper arrives during it
        return b"reply"

    cache = ScrapeCache(slow_render, max_age_s=3600.0)
    replies: list[bytes] = []
    scrapers = [threading.Thread(target=lambda: replies.append(cache.reply())) for _ in range(32)]
    for scraper in scrapers:
        scraper.start()
    for scraper in scrapers:
        scraper.join()
    assert started.is_set()
    assert replies == [b"reply"] * 32
    assert cache.renders == 1
