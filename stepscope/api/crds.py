"""The CustomResourceDefinitions, built from the models: names, columns, schemas.

`build_crds` is pure; `stepscope.api.crdgen` writes its result to ``crds/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from stepscope.api.schedule import ProfileSchedule, ProfileScheduleSpec, ProfileScheduleStatus
from stepscope.api.session import GROUP, VERSION, ProfileSession, ProfileSessionSpec
from stepscope.api.session_status import ProfileSessionStatus
from stepscope.api.structural import prose, structural_schema
from stepscope.api.trigger import ProfileTrigger, ProfileTriggerSpec, ProfileTriggerStatus

CATEGORIES = ["stepscope"]


def _column(
    name: str, json_path: str, description: str, *, type_: str = "string", priority: int = 0
) -> dict[str, Any]:
    column = {"name": name, "type": type_, "jsonPath": json_path, "description": description}
    if priority:
        column["priority"] = priority
    return column


_AGE = _column("Age", ".metadata.creationTimestamp", "Time since creation.", type_="date")


@dataclass(frozen=True)
class ResourceKind:
    """One custom resource kind and how ``kubectl`` names and prints it."""

    model: type[BaseModel]
    spec: type[BaseModel]
    status: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    columns: tuple[dict[str, Any], ...]

    @property
    def kind(self) -> str:
        return self.model.__name__

    @property
    def name(self) -> str:
        """The CRD's own name, ``<plural>.<group>``."""
        return f"{self.plural}.{GROUP}"


PROFILE_SESSION = ResourceKind(
    model=ProfileSession,
    spec=ProfileSessionSpec,
    status=ProfileSessionStatus,
    plural="profilesessions",
    short_names=("pss", "psession"),
    columns=(
        _column("Target", ".status.target", "The profiled job, as kind/name."),
        _column("Phase", ".status.phase", "Where the session is."),
        _column("Window", ".status.window.range", "Captured global steps, first-last."),
        _column("Step time", ".status.summary.stepTime", "Median step time."),
        _column("Bottleneck", ".status.summary.bottleneck", "What limits the step."),
        _AGE,
        _column("Granularity", ".spec.granularity", "How much is recorded.", priority=1),
        _column("Ranks", ".status.ranks.captured", "Ranks captured.", type_="integer", priority=1),
        _column(
            "Verdict", ".status.baselineComparison.verdict", "Against the baseline.", priority=1
        ),
    ),
)

PROFILE_SCHEDULE = ResourceKind(
    model=ProfileSchedule,
    spec=ProfileScheduleSpec,
    status=ProfileScheduleStatus,
    plural="profileschedules",
    short_names=("psched",),
    columns=(
        _column("Target", ".status.target", "The profiled job, as kind/name."),
        _column("Schedule", ".spec.schedule", "When sessions are created (cron, UTC)."),
        _column("Every", ".spec.every", "The interval sessions are created at."),
        _column("Last session", ".status.lastSession", "The session created last."),
        _column(
            "Last verdict",
            ".status.lastVerdict",
            "The newest judged session against the baseline.",
        ),
        _AGE,
        _column(
            "Suspend",
            ".spec.suspend",
            "Whether new sessions are held back.",
            type_="boolean",
            priority=1,
        ),
        _column(
            "Last schedule",
            ".status.lastScheduleTime",
            "Time since the last session.",
            type_="date",
            priority=1,
        ),
        _column(
            "Last regression",
            ".status.lastRegression.session",
            "The last session slower than the baseline.",
            priority=1,
        ),
    ),
)

PROFILE_TRIGGER = ResourceKind(
    model=ProfileTrigger,
    spec=ProfileTriggerSpec,
    status=ProfileTriggerStatus,
    plural="profiletriggers",
    short_names=("ptrig",),
    columns=(
        _column("Jobs", ".status.jobsWatched", "Watched jobs that answered.", type_="integer"),
        _column(
            "Last fired", ".status.lastFired.time", "When a session was last opened.", type_="date"
        ),
        _column("Why", ".status.lastFired.reason", "The rule that fired last."),
        _column("Session", ".status.lastFired.session", "The session it opened."),
        _AGE,
        _column("Job", ".status.lastFired.job", "The job that fired last.", priority=1),
        _column(
            "Suspend",
            ".spec.suspend",
            "Whether watching is held back.",
            type_="boolean",
            priority=1,
        ),
    ),
)

KINDS = (PROFILE_SESSION, PROFILE_SCHEDULE, PROFILE_TRIGGER)


def build_crd(kind: ResourceKind) -> dict[str, Any]:
    """The CustomResourceDefinition of `kind`, ready to serialise."""
    schema = {
        "description": prose(kind.model.__doc__ or ""),
        "type": "object",
        "properties": {
            "apiVersion": {"description": "stepscope.dev/v1alpha1", "type": "string"},
            "kind": {"description": kind.kind, "type": "string"},
            "metadata": {"type": "object"},
            "spec": structural_schema(kind.spec),
            "status": structural_schema(kind.status),
        },
        "required": ["spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": list(kind.short_names),
                "categories": CATEGORIES,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(column) for column in kind.columns],
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def build_crds() -> list[dict[str, Any]]:
    """Every CRD stepscope installs."""
    return [build_crd(kind) for kind in KINDS]
