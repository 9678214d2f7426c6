"""The demo flow as a test: a 4-rank CPU PyTorchJob, a ProfileSession, and an analysed
status, a story of Events, and the artifacts in S3; deleting the session removes them."""

from __future__ import annotations

import pytest
from e2e_helpers import (
    apply,
    check_pods_ran_on_platform,
    profile_session,
    pytorchjob,
    running_pods,
)
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL as PYTORCHJOB_NAME_LABEL
from support import wait_until
from support.operator_helpers import session_phase
from support.session_checks import check_analysed_session, check_delete_removes_artifacts

pytestmark = pytest.mark.e2e


def test_session_from_apply_to_analysed_describe(e2e_platform, namespace, operator_process):
    cluster = e2e_platform.cluster
    apply(
        cluster,
        pytorchjob(
            e2e_platform,
            namespace,
            "ddp",
            workers=3,
            args=["--steps", "3000", "--step-sleep", "0.05"],
        ),
    )
    wait_until(running_pods(cluster, namespace, "ddp"), 180, "4 running pods")
    check_pods_ran_on_platform(e2e_platform, namespace, f"{PYTORCHJOB_NAME_LABEL}=ddp")
    apply(cluster, profile_session(namespace, "ddp-profile", "ddp"))

    wait_until(
        lambda: (
            session_phase(cluster, namespace, "ddp-profile")
            in ("Succeeded", "PartiallySucceeded", "Failed")
        ),
        180,
        "a final phase",
        interval=1,
    )
    status = check_analysed_session(
        cluster, namespace, "ddp-profile", target="pytorchjob/ddp", ranks=4
    )
    check_delete_removes_artifacts(cluster, namespace, "ddp-profile", status)
