"""The ProfileSession a firing opens: the trigger's template aimed at the job that fired,
owned by the trigger, under a name a restarted operator derives again; and the baseline
session a trigger opens for a steady job that has none (triggers/baselines.py).

The name is the job, the reason and a time: for a hang, the agent-clock minute the job
last stepped (the same stall gives the same name, however often the operator restarts);
for the other reasons, the start of the cooldown period the firing falls in (one session
per job, reason and cooldown); for a baseline, the UTC day and the try (at most a few a job
a day, triggers/recording.py). Creating a name that exists already is answered 409, so a
restarted operator that fires again on the same evidence opens nothing twice.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from stepscope.api.hang_status import SessionMode
from stepscope.api.session import API_VERSION, ProfileSessionSpec, TargetSpec
from stepscope.api.text import clip_text
from stepscope.api.trigger import ProfileTriggerSpec, TriggerReason
from stepscope_operator.triggers.evidence import Evidence

# The trigger's UID (a label value must be at most 63 characters; a name may be 253).
TRIGGER_LABEL = "stepscope.dev/trigger-uid"
JOB_ANNOTATION = "stepscope.dev/trigger-job"
REASON_ANNOTATION = "stepscope.dev/trigger-reason"
FIRED_ANNOTATION = "stepscope.dev/trigger-fired-at"
EVIDENCE_ANNOTATION = "stepscope.dev/trigger-evidence"
# On a baseline session the trigger opened: the job, as kind/name. Such a session has no
# reason annotation, so it is never counted as a firing (firing.recorded_firings).
BASELINE_FOR_ANNOTATION = "stepscope.dev/trigger-baseline-for"
EVIDENCE_MAX_LENGTH = 1024
SHORT_REASONS = {
    TriggerReason.STEP_TIME_OUT_OF_BAND: "slow",
    TriggerReason.STRAGGLER: "straggler",
    TriggerReason.NO_PROGRESS: "hang",
    TriggerReason.DATA_WAIT: "datawait",
}
# 63 characters in all, so the name also fits where it becomes a label value or a Job name.
_JOB_PART = 33


def _slug(text: str) -> str:
    """`text` as a part of a DNS-1123 name, at most `_JOB_PART` characters; a shortened one
    ends in a hash of the whole, so two long names do not meet."""
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "job"
    if len(slug) <= _JOB_PART:
        return slug
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return f"{slug[: _JOB_PART - 7].rstrip('-')}-{digest}"


def firing_time_key(evidence: Evidence, now: datetime, cooldown_s: int) -> str:
    """The time part of the session's name (UTC, minutes)."""
    if evidence.opens_hang_check and evidence.since is not None:
        moment = datetime.fromtimestamp(evidence.since, UTC)
    else:
        moment = datetime.fromtimestamp(now.timestamp() // cooldown_s * cooldown_s, UTC)
    return moment.strftime("%Y%m%d%H%M")


def session_name(job_name: str, evidence: Evidence, time_key: str) -> str:
    return f"{_slug(job_name)}-{SHORT_REASONS[evidence.reason]}-{time_key}"


def baseline_session_name(job_name: str, now: datetime, attempt: int = 1) -> str:
    """The day's first baseline is `<job>-baseline-<day>`, a retry `<job>-baseline-<day>-<n>`."""
    day = f"{_slug(job_name)}-baseline-{now.astimezone(UTC).strftime('%Y%m%d')}"
    return day if attempt == 1 else f"{day}-{attempt}"


def session_for_firing(
    trigger: dict[str, Any],
    spec: ProfileTriggerSpec,
    target: TargetSpec,
    job: str,
    evidence: Evidence,
    name: str,
    now: datetime,
    baseline: str | None = None,
) -> dict[str, Any]:
    """The ProfileSession to create, validated here so a bad value fails naming its field.
    `baseline` becomes its spec.baseline.sessionRef unless the template names one: a
    baseline the user chose wins over the one the trigger found."""
    session_spec = spec.session_template.to_wire()
    session_spec["target"] = target.to_wire()
    if evidence.opens_hang_check:
        session_spec["mode"] = SessionMode.HANG_CHECK.value
        session_spec.setdefault(
            "hangCheck",
            {
                "thresholdFloorSeconds": spec.rules.hang.threshold_floor_seconds,
                "stepTimeMultiplier": spec.rules.hang.step_time_multiplier,
            },
        )
    elif baseline is not None:
        session_spec.setdefault("baseline", {"sessionRef": baseline})
    notes = {
        JOB_ANNOTATION: job,
        REASON_ANNOTATION: evidence.reason.value,
        FIRED_ANNOTATION: now.isoformat(),
        EVIDENCE_ANNOTATION: clip_text(evidence.message, EVIDENCE_MAX_LENGTH),
    }
    return _owned_session(trigger, name, session_spec, notes)


def session_for_baseline(
    trigger: dict[str, Any], spec: ProfileTriggerSpec, target: TargetSpec, job: str, name: str
) -> dict[str, Any]:
    """A healthy session of the job from the trigger's template, to be its baseline."""
    session_spec = spec.session_template.to_wire()
    session_spec["target"] = target.to_wire()
    return _owned_session(trigger, name, session_spec, {BASELINE_FOR_ANNOTATION: job})


def _owned_session(
    trigger: dict[str, Any], name: str, session_spec: dict[str, Any], notes: dict[str, str]
) -> dict[str, Any]:
    meta = trigger["metadata"]
    ProfileSessionSpec.model_validate(session_spec)
    return {
        "apiVersion": API_VERSION,
        "kind": "ProfileSession",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {TRIGGER_LABEL: meta["uid"]},
            "annotations": notes,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ProfileTrigger",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": session_spec,
    }
