"""The README's schedule example (`kubectl get profileschedules`, `kubectl describe
profileschedule`), derived from recorded sessions by the operator's own schedule code.

The sessions are tests/data/schedule/sessions: five sessions of a real 4-rank DDP job, taken
at the ticks of an ``every: 30s`` schedule the way the operator takes them, the fourth with
25 ms of extra compute per step (tests/data/schedule/generate.py recorded them). Here the
schedule `ddp-watch` runs on a local control plane and its real S3: at each recorded tick the
operator's reconciliation (`schedules.flow.reconcile_schedule`) creates that tick's session;
the session then finishes as recorded (its summary.json where the operator reads it, its
status as the session flow writes it), and the next reconciliation judges it against the
ones before it and posts the Events. The operator's clock reads the recorded times, so the
names, the verdicts and the status are the same on every run.

`make docs-examples` prints the outcome through real kubectl, without the columns that only
say how long ago the example ran, and rewrites the README's two blocks;
tests/integration/api/test_readme_schedule.py derives them again and fails when they differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes import config as k8s_config
from stepscope_operator.context import OperatorContext
from stepscope_operator.kubeapi import KubeApi
from stepscope_operator.schedules.flow import reconcile_schedule
from stepscope_operator.schedules.scheduling import SCHEDULE_LABEL, every_of
from stepscope_operator.sessions.collecting import write_job_summary
from stepscope_operator.sessions.status import final_phase, summary_from_job
from stepscope_operator.settings import load_settings
from stepscope_operator.storage.buckets import connect_buckets

from stepscope.analysis.model.job_summary import JobSummary
from stepscope.api.schedule import ProfileScheduleSpec
from stepscope.api.session import API_VERSION
from stepscope.api.session_status import ProfileSessionStatus, RanksStatus, StatusWindow
from stepscope.storage import session_prefix
from stepscope_dev.describe_example import (
    NAMESPACE,
    README,
    excerpt,
    printed_on_local_cluster,
)
from stepscope_dev.readme_blocks import block_lines, rewrite_block

REPO_ROOT = Path(__file__).resolve().parents[2]
SESSIONS = REPO_ROOT / "tests" / "data" / "schedule" / "sessions"
GET_MARKER = "<!-- schedule-get: make docs-examples writes this block; a test checks it -->"
MARKER = "<!-- schedule-describe: make docs-examples writes this block; a test checks it -->"
NAME = "ddp-watch"
JOB = "ddp"
GET_COMMAND = "kubectl get profileschedules"
DESCRIBE_COMMAND = f"kubectl describe profileschedule {NAME}"

# The schedule as the README shows it; the sessions were recorded with its template.
SCHEDULE: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ProfileSchedule",
    "metadata": {"name": NAME},
    "spec": {
        "every": "30s",
        "concurrencyPolicy": "Forbid",
        "historyLimit": 10,
        "sessionTemplate": {
            "target": {"pytorchJob": JOB},
            "window": {"steps": 20, "warmupSteps": 1, "leadSeconds": 2, "timeoutSeconds": 120},
            "granularity": "ops",
        },
    },
}

# What the README keeps of the describe output (see describe_example.excerpt).
KEPT: tuple[tuple[str, ...], ...] = (
    ("Name",),
    ("Namespace",),
    ("Status", "Baseline"),
    ("Status", "Last Regression"),
    ("Status", "Last Verdict"),
    ("Status", "Target"),
    ("Events",),
)
# Columns that say how long ago the example ran, in the two printouts.
AGE_COLUMNS = ("AGE", "Age")


@dataclass(frozen=True)
class RecordedSession:
    """One recorded session: its tick, its window, its merged job summary."""

    tick: datetime
    start_step: int
    end_step: int
    start_time: datetime
    end_time: datetime
    extra_compute_ms: float
    job: JobSummary

    @property
    def name(self) -> str:
        # As the operator names an `every` schedule's sessions: seconds since the epoch.
        return f"{NAME}-{int(self.tick.timestamp())}"


def recorded_sessions(folder: Path = SESSIONS) -> list[RecordedSession]:
    """The recorded sessions in the order they ran."""
    sessions = []
    for path in sorted(folder.glob("*.json"), key=lambda p: int(p.stem)):
        data = json.loads(path.read_text(encoding="utf-8"))
        window = data["window"]
        sessions.append(
            RecordedSession(
                tick=datetime.fromisoformat(data["tick"]),
                start_step=window["startStep"],
                end_step=window["endStep"],
                start_time=datetime.fromisoformat(window["startTime"]),
                end_time=datetime.fromisoformat(window["endTime"]),
                extra_compute_ms=data["extraComputeMs"],
                job=JobSummary.model_validate(data["job"]),
            )
        )
    return sessions


def finished_status(session: RecordedSession) -> ProfileSessionStatus:
    """The status the session flow writes when every rank captured the recorded window."""
    job = session.job
    ranks = RanksStatus.tally(
        expected=job.world_size, captured=len(job.ranks), misaligned=0, missing=(), failed=()
    )
    phase, _, _ = final_phase(ranks)
    return ProfileSessionStatus(
        phase=phase,
        observed_generation=1,
        target=f"pytorchjob/{JOB}",
        window=StatusWindow(
            start_step=session.start_step,
            end_step=session.end_step,
            start_time=session.start_time,
            end_time=session.end_time,
        ),
        ranks=ranks,
        summary=summary_from_job(job),
    )


@dataclass
class RecordedClock(OperatorContext):
    """The operator's context with its clock set to the recorded times."""

    clock: datetime | None = field(default=None, kw_only=True)

    def now(self) -> datetime:
        assert self.clock is not None, "set the clock before a reconciliation"
        return self.clock


class OrderedEvents(KubeApi):
    """The operator's API client, posting each Event at least a second after the one before:
    the API server keeps an Event's time in whole seconds and kubectl orders Events by it, so
    two Events of one second could print in either order."""

    _last_posted = float("-inf")

    async def post_event(self, body: dict[str, Any], type_: str, reason: str, message: str) -> None:
        await asyncio.sleep(max(0.0, self._last_posted + 1.0 - time.monotonic()))
        await super().post_event(body, type_, reason, message)
        self._last_posted = time.monotonic()


def _schedule_body(cluster: Any, namespace: str) -> dict[str, Any]:
    printed = cluster.kubectl("get", "profileschedule", NAME, "-n", namespace, "-o", "json")
    return json.loads(printed.stdout)


def _session_body(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    printed = cluster.kubectl("get", "profilesession", name, "-n", namespace, "-o", "json")
    return json.loads(printed.stdout)


async def _play(cluster: Any, namespace: str, sessions: Sequence[RecordedSession]) -> None:
    settings = load_settings(cluster.env())
    buckets = connect_buckets(settings)
    kube = OrderedEvents(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    async with aiohttp.ClientSession() as http:
        # No session waits for a turn here: each finishes as it was recorded.
        ctx = RecordedClock(settings, kube, http, buckets, turns=None)
        for session in sessions:
            ctx.clock = session.tick
            await reconcile_schedule(ctx, _schedule_body(cluster, namespace))
            created = _session_body(cluster, namespace, session.name)
            meta = created["metadata"]
            prefix = session_prefix(settings.s3_prefix, namespace, meta["name"], meta["uid"])
            write_job_summary(buckets, prefix, session.job)
            await kube.patch_session_status(
                namespace, session.name, finished_status(session).to_wire()
            )
            ctx.clock = session.end_time
            await reconcile_schedule(ctx, _schedule_body(cluster, namespace))


def play_schedule(
    cluster: Any, namespace: str, sessions: Sequence[RecordedSession] | None = None
) -> None:
    """Create the schedule in ``namespace`` and let the operator's reconciliation run it over
    the recorded sessions: at each tick, then when that tick's session has finished."""
    sessions = recorded_sessions() if sessions is None else sessions
    schedule = json.loads(json.dumps(SCHEDULE))
    schedule["metadata"]["namespace"] = namespace
    cluster.kubectl("create", "-f", "-", input=json.dumps(schedule))
    # The schedule object is created now, long after the recorded ticks: its status says
    # the tick before the first was handled, so the first recorded tick is the one due.
    interval = every_of(ProfileScheduleSpec.model_validate(SCHEDULE["spec"]))
    assert interval is not None, "the example schedule ticks at an interval"
    first = sessions[0].tick - interval
    status = {"lastTickTime": first.isoformat().replace("+00:00", "Z")}
    cluster.kubectl(
        "patch", "profileschedule", NAME, "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip
    try:
        asyncio.run(_play(cluster, namespace, sessions))
    finally:
        _forget_summaries(cluster, namespace)


def _forget_summaries(cluster: Any, namespace: str) -> None:
    """The summaries written for the example, removed from the cluster's S3 again."""
    settings = load_settings(cluster.env())
    buckets = connect_buckets(settings)
    listed = cluster.kubectl(
        "get", "profilesessions", "-n", namespace, "-l", f"{SCHEDULE_LABEL}={NAME}", "-o", "json"
    )
    for session in json.loads(listed.stdout)["items"]:
        meta = session["metadata"]
        prefix = session_prefix(settings.s3_prefix, namespace, meta["name"], meta["uid"])
        buckets.delete_prefix(prefix)


def without_columns(lines: Sequence[str], headers: Sequence[str] = AGE_COLUMNS) -> list[str]:
    """Tables printed by kubectl with the named columns cut out: from a column's header to
    the next column's, in the header line and every row below it up to the table's end."""
    out: list[str] = []
    cut: tuple[int, int] | None = None
    for line in lines:
        words = line.split()
        found = [h for h in headers if h in words]
        if found:
            start = line.index(f" {found[0]}") + 1 if not line.startswith(found[0]) else 0
            rest = line[start + len(found[0]) :]
            gap = len(rest) - len(rest.lstrip(" "))
            end = start + len(found[0]) + gap if rest.strip() else len(line)
            cut = (start, end)
        elif cut is not None and not line.strip():
            cut = None
        out.append((line[: cut[0]] + line[cut[1] :]).rstrip() if cut else line)
    return out


def get_lines(cluster: Any, namespace: str) -> list[str]:
    """What real `kubectl get profileschedules` prints, without the AGE column."""
    printed = cluster.kubectl("get", "profileschedules", "-n", namespace).stdout
    return without_columns([line.rstrip() for line in printed.splitlines()])


def describe_lines(cluster: Any, namespace: str) -> list[str]:
    """What real `kubectl describe` prints for the schedule, namespace as in the README,
    without the Events' Age column."""
    printed = cluster.kubectl("describe", "profileschedule", NAME, "-n", namespace).stdout
    lines = [line.rstrip().replace(namespace, NAMESPACE) for line in printed.splitlines()]
    return without_columns(lines)


def printed_blocks(cluster: Any, namespace: str) -> tuple[list[str], list[str]]:
    """Play the schedule in ``namespace``; the README's two blocks, derived."""
    play_schedule(cluster, namespace)
    return get_lines(cluster, namespace), excerpt(describe_lines(cluster, namespace), KEPT)


def readme_blocks(text: str) -> tuple[list[str], list[str]]:
    """The README's get and describe blocks, without their ``$`` command lines."""
    return block_lines(text, GET_MARKER), block_lines(text, MARKER)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="fail if the README is not current")
    parser.add_argument("--readme", type=Path, default=README, help="the README to rewrite")
    args = parser.parse_args(argv)
    got, described = printed_on_local_cluster(printed_blocks)
    return max(
        rewrite_block(args.readme, GET_MARKER, GET_COMMAND, got, "schedule get", args.check),
        rewrite_block(
            args.readme, MARKER, DESCRIBE_COMMAND, described, "schedule describe", args.check
        ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
