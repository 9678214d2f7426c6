"""An analysis Job that cannot do its work leaves a Succeeded session with a note.

The operator here asks for analysis Jobs the API server refuses (a memory request above
the limit); the session still ends Succeeded with its verdict, the condition
ArtifactsRendered is False with the reason and the note, and no report or merged trace
is claimed in status.artifacts. (Job failures on bad input, after the Job ran, are in
tests/integration/operator/test_hostile_rank_artifacts.py.)
"""

from __future__ import annotations

import pytest
from e2e_helpers import apply, profile_session, pytorchjob, running_pods
from e2e_platform import stop_audited_operator
from support import wait_until
from support.operator_helpers import get_session, session_phase

pytestmark = pytest.mark.e2e

REFUSED_RESOURCES = '{"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}'


@pytest.fixture
def refusing_operator(e2e_platform, tmp_path):
    process = e2e_platform.start_operator(
        tmp_path / "operator.log", STEPSCOPE_ANALYSIS_JOB_RESOURCES=REFUSED_RESOURCES
    )
    yield process
    stop_audited_operator(process)


def test_a_refused_analysis_job_is_a_note(e2e_platform, namespace, refusing_operator):
    cluster = e2e_platform.cluster
    args = ["--steps", "3000", "--step-sleep", "0.05"]
    apply(cluster, pytorchjob(e2e_platform, namespace, "ddp", workers=1, args=args))
    wait_until(running_pods(cluster, namespace, "ddp"), 180, "2 running pods")
    apply(cluster, profile_session(namespace, "noted", "ddp"))
    wait_until(
        lambda: (
            session_phase(cluster, namespace, "noted")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = get_session(cluster, namespace, "noted")["status"]
    assert status["phase"] == "Succeeded", status
    assert status["summary"]["stepTimeMs"]["p50"] > 0
    rendered = next(c for c in status["conditions"] if c["type"] == "ArtifactsRendered")
    assert rendered["status"] == "False" and rendered["reason"] == "AnalysisJobNotCreated"
    assert "could not be created (422" in rendered["message"], rendered
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "notes:" in ready["message"] and "the verdict stands" in ready["message"]
    assert "report" not in status["artifacts"] and "mergedTrace" not in status["artifacts"]
