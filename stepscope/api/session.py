"""ProfileSession: profile every rank of one training job over the same global steps.

The spec is desired state written by users; the status (`stepscope.api.session_status`)
is observed state written by the operator.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StrictStr
from pydantic.alias_generators import to_snake

from stepscope.api.base import ApiModel
from stepscope.api.hang_status import HangCheckSpec, SessionMode
from stepscope.api.meta import LabelSelector
from stepscope.api.rules import (
    CelRule,
    at_least,
    duration,
    duration_at_most,
    in_range,
    object_name,
    rank_selection,
)
from stepscope.api.session_status import MAX_WINDOW_REPEAT, ProfileSessionStatus
from stepscope.tiers import Tier

GROUP = "stepscope.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

MAX_WINDOW_STEPS = 1000
MAX_WARMUP_STEPS = 100


class TargetKind(StrEnum):
    """What a session profiles: the one field of spec.target that is set.

    Each kind has one adapter in ``stepscope_operator.targets.kinds`` that knows its pods,
    their ranks and when the job has finished.
    """

    PYTORCH_JOB = "pytorchJob"
    TRAIN_JOB = "trainJob"
    JOB_SET = "jobSet"
    POD_SELECTOR = "podSelector"


def _kinds_in_words() -> str:
    names = [kind.value for kind in TargetKind]
    return ", ".join(names[:-1]) + " or " + names[-1]


class TargetSpec(ApiModel):
    """Which training job to profile, and which of its ranks take full traces."""

    cel_rules = (
        CelRule(
            cel=" + ".join(f"(has(self.{kind}) ? 1 : 0)" for kind in TargetKind) + " == 1",
            message=f"target must set exactly one of {_kinds_in_words()}",
            check=lambda target: sum(target.ref_of(kind) is not None for kind in TargetKind) == 1,
        ),
    )

    pytorch_job: Annotated[StrictStr, object_name("target.pytorchJob", "PyTorchJob")] | None = (
        Field(
            None,
            description=(
                "Desired state. Name of a Kubeflow PyTorchJob (kubeflow.org/v1) in this "
                "namespace whose pods are profiled. Exactly one of pytorchJob, trainJob, "
                "jobSet and podSelector is set."
            ),
        )
    )
    train_job: Annotated[StrictStr, object_name("target.trainJob", "TrainJob")] | None = Field(
        None,
        description=(
            "Desired state. Name of a Kubeflow TrainJob (trainer.kubeflow.org/v1alpha1) in "
            "this namespace whose pods are profiled. Exactly one of pytorchJob, trainJob, "
            "jobSet and podSelector is set."
        ),
    )
    job_set: Annotated[StrictStr, object_name("target.jobSet", "JobSet")] | None = Field(
        None,
        description=(
            "Desired state. Name of a JobSet (jobset.x-k8s.io/v1alpha2) in this namespace "
            "whose pods are profiled: every pod of every replicated job, ranked in the order "
            "of spec.replicatedJobs, then by job index, then by completion index. Exactly one "
            "of pytorchJob, trainJob, jobSet and podSelector is set."
        ),
    )
    pod_selector: LabelSelector | None = Field(
        None,
        description=(
            "Desired state. Profile the pods in this namespace matching this label selector "
            "(they must run the stepscope agent). Exactly one of pytorchJob, trainJob, jobSet "
            "and podSelector is set."
        ),
        json_schema_extra={"x-kubernetes-map-type": "atomic"},
    )
    ranks: Annotated[StrictStr, *rank_selection("target.ranks")] = Field(
        "all",
        description=(
            "Desired state. Which ranks take full traces: 'all', 'one-per-node' (the lowest "
            "rank on each node), or a comma-separated list of global ranks and ranges such as "
            "'0,3,7' or '0-3,8'. Every rank still reports step timings. Default: all."
        ),
    )

    def ref_of(self, kind: TargetKind) -> Any:
        """The value of the spec.target field of `kind`: a name, or a label selector."""
        # Each field is its kind in snake case (the wire name is camelCase by the alias
        # generator); tests/unit/api checks that every field has its kind.
        return getattr(self, to_snake(kind.value))

    @property
    def kind(self) -> TargetKind:
        """The kind of target that is set (validation guarantees exactly one)."""
        return next(kind for kind in TargetKind if self.ref_of(kind) is not None)

    @property
    def ref(self) -> Any:
        """The set target as served on the wire: a job name, or a label selector dict."""
        return self.to_wire()[self.kind.value]


class WindowSpec(ApiModel):
    """How many global steps to capture, and when."""

    cel_rules = (
        CelRule(
            cel="self.timeoutSeconds > self.leadSeconds",
            message=(
                "window.timeoutSeconds must be greater than window.leadSeconds: the capture "
                "cannot finish before it starts"
            ),
            check=lambda window: window.timeout_seconds > window.lead_seconds,
            field_path=".timeoutSeconds",
        ),
        CelRule(
            cel="!has(self.startStep) || !has(self.repeat) || self.repeat == 1",
            message=(
                "window.startStep cannot be combined with window.repeat above 1: each window "
                "starts where the operator plans it; unset startStep or set repeat to 1"
            ),
            check=lambda window: window.start_step is None or window.repeat == 1,
            field_path=".repeat",
        ),
    )

    steps: (
        Annotated[
            StrictInt,
            in_range(
                "window.steps", 1, MAX_WINDOW_STEPS, "the number of training steps to capture"
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Desired state. Number of consecutive global training steps captured on every "
            "rank, 1 to 1000. Unset: the fewest steps that decide a rank late by 10% of the "
            "step at the job's rank count (11 at 4 ranks, 8 at 8 ranks), at most 50 for "
            "granularity steps, 20 for ops and 10 for full; status.window shows the steps "
            "planned. Default: unset."
        ),
    )
    warmup_steps: Annotated[
        StrictInt,
        in_range(
            "window.warmupSteps", 0, MAX_WARMUP_STEPS, "profiler warm-up steps before capture"
        ),
    ] = Field(
        1,
        description=(
            "Desired state. Steps the profiler runs before the window without recording, so "
            "its start-up cost stays out of the numbers, 0 to 100. Default: 1."
        ),
    )
    start_step: Annotated[StrictInt, at_least("window.startStep", 0)] | None = Field(
        None,
        description=(
            "Desired state. Absolute global step at which capture starts on every rank. "
            "Unset: the operator plans the nearest step that every rank reaches after "
            "leadSeconds. Default: unset."
        ),
    )
    lead_seconds: Annotated[
        StrictInt, in_range("window.leadSeconds", 0, 3600, "seconds of notice the agents get")
    ] = Field(
        10,
        description=(
            "Desired state. Seconds of notice, at the job's current step rate, between "
            "arming the agents and the first captured step when the operator plans the "
            "start step, 0 to 3600. Default: 10."
        ),
    )
    timeout_seconds: Annotated[
        StrictInt,
        in_range("window.timeoutSeconds", 1, 86400, "seconds before an unfinished capture fails"),
    ] = Field(
        900,
        description=(
            "Desired state. Seconds from arming until the session gives up on ranks that "
            "have not delivered their capture, 1 to 86400. Default: 900."
        ),
    )
    repeat: Annotated[
        StrictInt,
        in_range(
            "window.repeat", 1, MAX_WINDOW_REPEAT, "the number of windows captured in sequence"
        ),
    ] = Field(
        1,
        description=(
            "Desired state. Windows captured one after another, each a full window of the "
            "same steps on every rank, judged together: a straggler is named only when it is "
            "late in every window, a rank late in some windows only is a low finding. Each "
            "window is planned after the previous one was collected, so some steps pass "
            "between windows (status.windows shows each window's steps). 1 to 10; above 1 "
            "needs startStep unset. Default: 1."
        ),
    )


# The API server validates a default against the CEL rules before nested defaults apply,
# so an omitted window defaults to the whole default object, not to {}.
WINDOW_DEFAULT = WindowSpec().to_wire()


# Retention must end: a year keeps a baseline through any investigation, and an
# unbounded value (99999999h) once validated and then overflowed the expiry date.
MAX_RETENTION = timedelta(hours=8760)


class ArtifactsSpec(ApiModel):
    """How long the traces and the report are kept in object storage."""

    retention: (
        Annotated[
            StrictStr,
            duration("artifacts.retention"),
            duration_at_most(
                "artifacts.retention",
                MAX_RETENTION,
                "one year; copy artifacts elsewhere to keep them longer",
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Desired state. How long artifacts are kept after the session ends, as a "
            "duration in hours, minutes and seconds (168h, 90m, 1h30m), at most 8760h "
            "(one year). Default: unset, meaning the operator's configured retention."
        ),
    )


class BaselineSpec(ApiModel):
    """An earlier session to compare this one with."""

    session_ref: Annotated[StrictStr, object_name("baseline.sessionRef", "ProfileSession")] = Field(
        description=(
            "Desired state. Name of an earlier ProfileSession in this namespace; the result "
            "lands in status.baselineComparison. Required when baseline is set."
        ),
    )


class ProfileSessionSpec(ApiModel):
    """Desired state of a ProfileSession: what to profile, for how long, and how deeply."""

    target: TargetSpec = Field(description="Desired state. The training job to profile. Required.")
    window: WindowSpec = Field(
        default_factory=WindowSpec,
        description="Desired state. The global steps to capture. Default: 5 steps, planned.",
        json_schema_extra={"default": WINDOW_DEFAULT},
    )
    # The tiers of the one tier table (stepscope/tiers.py), as the agent records them.
    granularity: Tier = Field(
        Tier.OPS,
        description=(
            "Desired state. How much is recorded: 'steps' (per-step phase timings and GPU "
            "counters only), 'ops' (plus CPU and CUDA profiler activities), 'full' (plus "
            "shapes, stacks, memory and FLOPs; shapes may be sensitive). Default: ops."
        ),
    )
    artifacts: ArtifactsSpec = Field(
        default_factory=ArtifactsSpec,
        description="Desired state. Retention of the stored artifacts. Default: operator config.",
        json_schema_extra={"default": {}},
    )
    baseline: BaselineSpec | None = Field(
        None,
        description="Desired state. A session to compare against. Default: none.",
    )
    mode: SessionMode = Field(
        SessionMode.PROFILE,
        description=(
            "Desired state. 'profile' captures the window and analyses it; 'hang-check' "
            "watches step progress and, when no rank advances for longer than the hang "
            "threshold, names the stuck rank, collective and line (see hangCheck). "
            "Default: profile."
        ),
    )
    hang_check: HangCheckSpec | None = Field(
        None,
        description=(
            "Desired state. Thresholds of a hang-check session. Default: unset, meaning "
            "the defaults of each field."
        ),
    )


class ProfileSession(ApiModel):
    """ProfileSession profiles every rank of a distributed PyTorch training job over the same
    global steps and writes the analysed result (step time, breakdown, straggler, bottleneck,
    findings) into its status; traces and the report go to object storage."""

    api_version: Literal["stepscope.dev/v1alpha1"] = API_VERSION
    kind: Literal["ProfileSession"] = "ProfileSession"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ProfileSessionSpec
    status: ProfileSessionStatus | None = None


def describe_target(target: TargetSpec) -> str:
    """The target as one short word pair for the Target column, e.g. ``pytorchjob/llama-ft``
    (a named job is its kind in lower case, as ``kubectl get`` spells resources)."""
    if target.kind is not TargetKind.POD_SELECTOR:
        return f"{target.kind.value.lower()}/{target.ref_of(target.kind)}"
    selector = target.pod_selector
    assert selector is not None, "TargetSpec validation guarantees exactly one target"
    labels = [f"{key}={value}" for key, value in sorted(selector.match_labels.items())]
    labels += [f"{req.key} {req.operator}" for req in selector.match_expressions]
    return "pods/" + ",".join(labels)
