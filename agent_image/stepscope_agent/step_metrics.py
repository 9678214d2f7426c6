"""The sidecar's always-on step metrics, in the Prometheus text exposition format (0.0.4).

Every number comes from the ranks' latest progress reports, which their channel threads send
twice a second (stepping.py, step_totals.py): a scrape reads what the sidecar already holds
and never reaches a trainer, so no number of scrapes can slow a training step. The sidecar
image has no Prometheus client library, and the format is a few lines of text, so it is
written here.

Whatever a tenant controls is bounded before it is exported. The labels are a fixed set
(``LABEL_NAMES``); their values come from the pod's environment and are cut to Kubernetes
name characters and ``LABEL_VALUE_MAX_CHARS``, with a hash suffix whenever that changed them so
that two cleaned values do not collide. At most ``MAX_RANKS_PER_POD`` ranks are exported, with
ranks outside ``0..MAX_RANK`` left out, and a value a trainer reports that is not a finite,
non-negative number (or a bucket list of the wrong shape) leaves its series out rather than
exporting garbage. The reply's size is therefore bounded (``MAX_REPLY_BYTES``).
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from itertools import accumulate

from stepscope_agent.registry import RankLink
from stepscope_agent.step_totals import BUCKET_COUNT, STEP_SECONDS_BUCKETS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABEL_NAMES = ("namespace", "job_kind", "job_name", "pod", "node", "rank")
# Kubernetes names and kinds need no more; a longer value is cut and hashed.
LABEL_VALUE_MAX_CHARS = 63
# The most ranks one pod's reply holds: a pod runs one rank per device, 8 or 16 of them on
# today's largest nodes. With every label at its longest the reply stays under
# MAX_REPLY_BYTES (315 KB measured); with ordinary names and 8 ranks it is about 30 KB.
MAX_RANKS_PER_POD = 32
MAX_REPLY_BYTES = 384 * 1024
MAX_RANK = 10_000_000
# Counts above this are not exact in a float, the type Prometheus keeps.
MAX_COUNT = 2**53
# A scrape storm renders the reply once per this many seconds; the data behind it moves
# only twice a second anyway.
SCRAPE_CACHE_SECONDS = 1.0

STEP_DURATION = "stepscope_step_duration_seconds"
STEPS = "stepscope_steps_total"
DATA_WAIT = "stepscope_data_wait_seconds_total"
HOOK = "stepscope_hook_seconds_total"
SINCE_LAST_STEP = "stepscope_seconds_since_last_step"
RANKS_NOT_EXPORTED = "stepscope_agent_ranks_not_exported"

# name -> (type, help); the order of the reply.
METRICS: dict[str, tuple[str, str]] = {
    STEP_DURATION: ("histogram", "Duration of each training step, per rank."),
    STEPS: ("counter", "Training steps completed, per rank."),
    DATA_WAIT: ("counter", "Seconds the training thread waited on a DataLoader, per rank."),
    HOOK: ("counter", "Seconds the stepscope hook held the training thread at step ends."),
    SINCE_LAST_STEP: (
        "gauge",
        "Seconds since the rank's last step ended (since it connected, before its first).",
    ),
    RANKS_NOT_EXPORTED: (
        "gauge",
        f"Ranks of this pod left out: beyond {MAX_RANKS_PER_POD} or numbered outside "
        f"0..{MAX_RANK}.",
    ),
}

_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_HASH_CHARS = 8


def sanitise_label_value(value: str | None) -> str:
    """Kubernetes name characters only, at most LABEL_VALUE_MAX_CHARS of them; a value this
    changes ends in a hash of the original, so distinct values stay distinct."""
    if not value:
        return ""
    cleaned = _UNSAFE_CHARS.sub("_", value[: LABEL_VALUE_MAX_CHARS + 1])
    if cleaned == value:
        return value
    # Environment values that are not UTF-8 arrive with surrogate escapes.
    digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:_HASH_CHARS]
    return f"{cleaned[: LABEL_VALUE_MAX_CHARS - _HASH_CHARS - 1]}_{digest}"


def escape_label_value(value: str) -> str:
    """The text format's escaping of a label value: backslash, double quote and newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(frozen=True)
class PodLabels:
    """The labels every series of this pod carries, already sanitised."""

    namespace: str
    job_kind: str
    job_name: str
    pod: str
    node: str

    @classmethod
    def sanitised(cls, **values: str | None) -> PodLabels:
        return cls(**{f.name: sanitise_label_value(values.get(f.name)) for f in fields(cls)})

    def text(self) -> str:
        return ",".join(
            f'{f.name}="{escape_label_value(getattr(self, f.name))}"' for f in fields(self)
        )


def render_metrics(labels: PodLabels, links: list[RankLink], now: float) -> bytes:
    """The whole reply for these ranks at unix time ``now``."""
    pod_labels = labels.text()
    valid = sorted((link for link in links if _is_rank(link.rank)), key=lambda link: link.rank)
    exported = valid[:MAX_RANKS_PER_POD]
    samples: dict[str, list[str]] = {name: [] for name in METRICS}
    for link in exported:
        _rank_samples(samples, f'{pod_labels},rank="{link.rank}"', link, now)
    left_out = len(links) - len(exported)
    samples[RANKS_NOT_EXPORTED].append(f"{RANKS_NOT_EXPORTED}{{{pod_labels}}} {left_out}")
    lines = []
    for name, (kind, help_text) in METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples[name]]
    return ("\n".join(lines) + "\n").encode()


def _is_rank(rank: object) -> bool:
    return isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank <= MAX_RANK


def _number(value: object) -> float | None:
    """A value a trainer reported, if it is a finite, non-negative number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return float(value) if 0 <= value <= MAX_COUNT else None
    return value if math.isfinite(value) and value >= 0 else None


def _bucket_counts(value: object) -> list[int] | None:
    if not isinstance(value, list) or len(value) != BUCKET_COUNT:
        return None
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value):
        return None
    cumulative = list(accumulate(value))
    return cumulative if cumulative[-1] <= MAX_COUNT else None


def _rank_samples(samples: dict[str, list[str]], series: str, link: RankLink, now: float) -> None:
    progress = link.progress
    last_step_at = _number(progress.last_step_at) if progress is not None else None
    since = now - (last_step_at if last_step_at is not None else link.connected_at)
    samples[SINCE_LAST_STEP].append(f"{SINCE_LAST_STEP}{{{series}}} {max(0.0, since)!r}")
    if progress is None:
        return
    cumulative = _bucket_counts(progress.step_buckets)
    step_seconds = _number(progress.step_seconds_total)
    if cumulative is not None and step_seconds is not None:
        histogram = samples[STEP_DURATION]
        for bound, count in zip(STEP_SECONDS_BUCKETS, cumulative, strict=False):
            histogram.append(f'{STEP_DURATION}_bucket{{{series},le="{bound!r}"}} {count}')
        histogram += [
            f'{STEP_DURATION}_bucket{{{series},le="+Inf"}} {cumulative[-1]}',
            f"{STEP_DURATION}_sum{{{series}}} {step_seconds!r}",
            f"{STEP_DURATION}_count{{{series}}} {cumulative[-1]}",
        ]
        samples[STEPS].append(f"{STEPS}{{{series}}} {cumulative[-1]}")
    for name, value in (
        (DATA_WAIT, progress.data_wait_seconds_total),
        (HOOK, progress.hook_seconds_total),
    ):
        if (number := _number(value)) is not None:
            samples[name].append(f"{name}{{{series}}} {number!r}")


class ScrapeCache:
    """The last rendered reply, kept for ``max_age_s``; concurrent scrapes wait on one
    render instead of each making its own."""

    def __init__(
        self,
        render: Callable[[], bytes],
        max_age_s: float = SCRAPE_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._render = render
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._body: bytes | None = None
        self._rendered_at = 0.0
        self.renders = 0

    def reply(self) -> bytes:
        with self._lock:
            now = self._clock()
            if self._body is None or now - self._rendered_at >= self._max_age_s:
                self._body = self._render()
                self._rendered_at = now
                self.renders += 1
            return self._body
