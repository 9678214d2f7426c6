"""The README's schedule blocks are what the operator's schedule code and real kubectl print.

stepscope_dev.schedule_example runs the operator's own reconciliation of the README's
`ddp-watch` schedule over sessions recorded from a real DDP job (tests/data/schedule): it
creates each tick's session on the real API server, judges each finished session against the
ones before it from the summaries in real S3, writes the status and posts the Events. What
real `kubectl get` and `kubectl describe` then print must equal the README's blocks line for
line; `make docs-examples` rewrites them.

Apart from the numbers, the mechanism is checked on what the operator wrote: the first
sessions find their baseline too small, the slowed session (the one recorded with extra
compute) is the one regression and compute carries most of its change, it stays out of the
baseline, and the restored session recovers.
"""

from __future__ import annotations

import json

import pytest
from stepscope_dev import schedule_example
from stepscope_dev.describe_example import README, excerpt
from stepscope_operator.schedules.scheduling import SCHEDULE_LABEL
from stepscope_operator.sessions.comparing import MIN_BASELINE_SESSIONS, compare_jobs

from stepscope.api.phases import Reason
from stepscope.api.schedule import ProfileScheduleSpec

pytestmark = pytest.mark.integration


def _sessions(cluster, namespace: str) -> dict[str, dict]:
    listed = cluster.kubectl(
        "get",
        "profilesessions",
        "-n",
        namespace,
        "-l",
        f"{SCHEDULE_LABEL}={schedule_example.NAME}",
        "-o",
        "json",
    )
    return {s["metadata"]["name"]: s for s in json.loads(listed.stdout)["items"]}


def _schedule_events(cluster, namespace: str) -> list[dict]:
    listed = cluster.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        f"--field-selector=involvedObject.name={schedule_example.NAME}",
        "-o",
        "json",
    )
    return json.loads(listed.stdout)["items"]


def test_readme_schedule_blocks_are_what_the_current_code_prints(crds_installed, namespace):
    schedule_example.play_schedule(crds_installed, namespace)
    got = schedule_example.get_lines(crds_installed, namespace)
    described = excerpt(
        schedule_example.describe_lines(crds_installed, namespace), schedule_example.KEPT
    )
    written_get, written_describe = schedule_example.readme_blocks(
        README.read_text(encoding="utf-8")
    )
    fix = "; run `make docs-examples` (it rewrites the block with):\n"
    assert written_get == got, "README.md's schedule get block is stale" + fix + "\n".join(got)
    assert written_describe == described, (
        "README.md's schedule describe block is stale" + fix + "\n".join(described)
    )


def test_the_slowed_session_is_the_regression_and_the_restored_one_recovers(
    crds_installed, namespace
):
    recorded = schedule_example.recorded_sessions()
    schedule_example.play_schedule(crds_installed, namespace, recorded)
    sessions = _sessions(crds_installed, namespace)
    assert sorted(sessions) == [s.name for s in recorded]
    verdicts = {name: s["status"]["baselineComparison"] for name, s in sessions.items()}
    slowed = max(recorded, key=lambda s: s.extra_compute_ms)
    position = recorded.index(slowed)
    assert position >= MIN_BASELINE_SESSIONS, "the slowdown comes after a full baseline"
    assert slowed.extra_compute_ms > 0 and recorded[-1].extra_compute_ms == 0

    for count, early in enumerate(recorded[:MIN_BASELINE_SESSIONS]):
        comparison = verdicts[early.name]
        assert comparison["verdict"] == "inconclusive", comparison
        good = f"{count} good session" + ("" if count == 1 else "s")
        assert comparison["reason"] == f"baseline has {good}; {MIN_BASELINE_SESSIONS} needed"
    regressions = [name for name, c in verdicts.items() if c["verdict"] == "regression"]
    assert regressions == [slowed.name], verdicts
    restored = verdicts[recorded[-1].name]
    assert restored["verdict"] in ("unchanged", "improvement"), restored
    # The regression is no baseline: the restored session is judged against the sessions
    # before the slowdown, not against the slowed one.
    assert slowed.name not in restored["baselineSessions"]

    # What carries the change, by the operator's comparison against the baseline it chose.
    jobs = {s.name: s.job for s in recorded}
    chosen = verdicts[slowed.name]["baselineSessions"]
    spec = ProfileScheduleSpec.model_validate(schedule_example.SCHEDULE["spec"])
    comparison = compare_jobs(
        (slowed.name, slowed.job), [(n, jobs[n]) for n in chosen], spec.regression.threshold_pct
    )
    assert comparison.verdict == "regression" and comparison.explanation is not None
    largest = comparison.explanation.categories[0]
    assert largest.name == "compute" and largest.share_pct is not None, largest
    assert largest.share_pct > 50, comparison.explanation.categories

    events = [(e["reason"], e["message"]) for e in _schedule_events(crds_installed, namespace)]
    too_small = [m for r, m in events if r == Reason.BASELINE_TOO_SMALL]
    assert len(too_small) == MIN_BASELINE_SESSIONS
    assert all(any(s.name in m for m in too_small) for s in recorded[:MIN_BASELINE_SESSIONS])
    assert [m for r, m in events if r == Reason.REGRESSION][0].startswith(
        f"session {slowed.name}: slower by"
    )
    (recovered,) = [m for r, m in events if r == Reason.RECOVERED]
    assert recovered.startswith(f"session {recorded[-1].name}:")
    schedule = json.loads(
        crds_installed.kubectl(
            "get", "profileschedule", schedule_example.NAME, "-n", namespace, "-o", "json"
        ).stdout
    )["status"]
    assert schedule["lastRegression"]["session"] == slowed.name
    assert schedule["baseline"]["sessions"] == len(recorded) - 1
    regressed = {c["type"]: c for c in schedule["conditions"]}["Regressed"]
    assert (regressed["status"], regressed["reason"]) == ("False", Reason.RECOVERED)


def test_age_columns_are_cut_from_kubectl_tables() -> None:
    printed = [
        "NAME        TARGET           AGE   LAST",
        "ddp-watch   pytorchjob/ddp   2m    x",
        "Events:",
        "  Type    Reason    Age   From   Message",
        "  ----    ------    ----  ----   -------",
        "  Normal  Created   5s    op     made it",
        "",
        "Age: not a table",
    ]
    assert schedule_example.without_columns(printed) == [
        "NAME        TARGET           LAST",
        "ddp-watch   pytorchjob/ddp   x",
        "Events:",
        "  Type    Reason    From   Message",
        "  ----    ------    ----   -------",
        "  Normal  Created   op     made it",
        "",
        "Age: not a table",
    ]
