"""The analysis Job's plan and manifest, as pure functions (no cluster, no storage calls).

The operator never opens a raw trace (DESIGN §10). What needs many ranks' raw data —
the merged Perfetto trace and the HTML report — is built by a Kubernetes Job in the
session's namespace, owned by the session (so deleting the session deletes the Job),
running the agent image's `stepscope-analysis-job` with the resource limits and the
deadline from the operator's settings. Its pod gets no storage credentials and no
service-account token: one presigned GET of its plan is all it is given
(`stepscope.api.analysis_job`). `rendering` creates it and waits for it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stepscope.analysis.merging.trace_selection import MergeSelection
from stepscope.api.agent import ArtifactGrant
from stepscope.api.analysis_job import (
    ANALYSIS_JOB_COMMAND,
    PLAN_URL_ENV,
    AnalysisPlan,
    TraceInput,
)
from stepscope.api.session import GROUP, VERSION
from stepscope_operator.agents.contract import AGENT_UID
from stepscope_operator.settings import OperatorSettings

CONTAINER_NAME = "analysis"
SESSION_LABEL = "stepscope.dev/session"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "stepscope-analysis"
# A finished Job is kept a day for `kubectl describe`, then the TTL controller removes it;
# deleting the session removes it sooner (owner reference).
FINISHED_JOB_TTL_SECONDS = 24 * 3600
SCRATCH_VOLUME = "scratch"
SCRATCH_MOUNT = "/tmp"


def analysis_job_name(session_name: str, session_uid: str) -> str:
    """A Job name unique to the session, within the 63 characters a label value allows
    (the Job controller labels its pods with it)."""
    return f"{session_name[:40].rstrip('-.')}-analysis-{session_uid.replace('-', '')[:8]}"


def build_analysis_plan(
    session: str,
    summary_url: str,
    selection: MergeSelection,
    trace_urls: dict[int, tuple[str, str]],
    merged_trace: ArtifactGrant | None,
    report: ArtifactGrant,
    result: ArtifactGrant,
    counter_urls: dict[int, str] | None = None,
    target: str = "",
    captured_at: datetime | None = None,
) -> AnalysisPlan:
    """The plan for the chosen ranks; `trace_urls` maps rank -> (s3 URI, presigned GET),
    `counter_urls` rank -> presigned GET of its counters.json."""
    reasons = selection.reasons_by_rank()
    return AnalysisPlan(
        session=session,
        target=target,
        captured_at=captured_at,
        summary_url=summary_url,
        traces=[
            TraceInput(
                rank=rank,
                name=trace_urls[rank][0],
                get_url=trace_urls[rank][1],
                reasons=reasons[rank],
                counters_url=(counter_urls or {}).get(rank),
            )
            for rank in selection.ranks
        ],
        selection=selection.describe(),
        over_budget_ranks=list(selection.over_budget),
        merged_trace=merged_trace if selection.chosen else None,
        report=report,
        result=result,
    )


def build_analysis_job(
    settings: OperatorSettings,
    namespace: str,
    session_name: str,
    session_uid: str,
    plan_url: str,
) -> dict[str, Any]:
    """The batch/v1 Job that renders one session's merged trace and report."""
    labels = {COMPONENT_LABEL: COMPONENT, SESSION_LABEL: session_name[:63].rstrip("-.")}
    container = {
        "name": CONTAINER_NAME,
        "image": settings.agent_image,
        "imagePullPolicy": settings.agent_image_pull_policy,
        "command": list(ANALYSIS_JOB_COMMAND),
        # The plan's GET is the only thing the Job is given; no AWS_* variable, no Secret.
        "env": [{"name": PLAN_URL_ENV, "value": plan_url}],
        "resources": settings.analysis_job_resources,
        "volumeMounts": [{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": AGENT_UID,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": analysis_job_name(session_name, session_uid),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ProfileSession",
                    "name": session_name,
                    "uid": session_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            # A bad trace or an OOM will not go better on a second try; the note says why.
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.analysis_job_deadline_seconds,
            "ttlSecondsAfterFinished": FINISHED_JOB_TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    # It talks to storage through presigned URLs only, never to the API.
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "containers": [container],
                    # The merged trace is spooled here before its upload.
                    "volumes": [{"name": SCRATCH_VOLUME, "emptyDir": {}}],
                },
            },
        },
    }


def job_outcome(job: dict[str, Any]) -> tuple[str, str] | None:
    """("Complete" | "Failed", reason and message) once the Job finished, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            why = ": ".join(p for p in (condition.get("reason"), condition.get("message")) if p)
            return condition["type"], why
    return None


def pod_failure(pods: list[dict[str, Any]]) -> str | None:
    """How the Job's container ended (OOMKilled, exit code), from its pods' statuses."""
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (status.get("state") or {}).get("terminated")
            if ended and ended.get("exitCode", 0) != 0:
                return f"container exited {ended.get('exitCode')} ({ended.get('reason', 'Error')})"
    return None
