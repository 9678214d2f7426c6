"""Shapes borrowed from Kubernetes meta/v1: label selectors and status conditions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StrictStr

from stepscope.api.base import ApiModel
from stepscope.api.rules import CelRule
from stepscope.api.text import BoundedText

# Condition fields are bounded more tightly than in meta/v1 (message 32 KiB, reason 1 KiB
# there) so a status with every condition set stays a few KiB.
# A Kubernetes object name (a pod, a session) is a DNS subdomain: at most 253 characters.
POD_NAME_MAX_LENGTH = 253
MAX_CONDITIONS = 8
CONDITION_MESSAGE_MAX_LENGTH = 512
CONDITION_REASON_MAX_LENGTH = 128
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


class LabelSelectorRequirement(ApiModel):
    """One set-based requirement on a label, as in meta/v1 LabelSelectorRequirement."""

    cel_rules = (
        CelRule(
            cel=(
                "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0"
                " : !has(self.values) || size(self.values) == 0"
            ),
            message=(
                "podSelector.matchExpressions: operators In and NotIn need at least one "
                "value; Exists and DoesNotExist take no values"
            ),
            check=lambda req: (len(req.values) > 0) == (req.operator in ("In", "NotIn")),
            field_path=".values",
        ),
    )

    key: StrictStr = Field(
        min_length=1,
        max_length=317,
        description="Desired state. The label key the requirement applies to. Required.",
    )
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="Desired state. How the key relates to the values. Required."
    )
    values: list[Annotated[StrictStr, Field(max_length=63)]] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Desired state. Label values for In and NotIn (at least one); empty for Exists "
            "and DoesNotExist. Default: empty."
        ),
    )


class LabelSelector(ApiModel):
    """Pods by label, as in meta/v1 LabelSelector; all requirements must hold.

    An empty selector is refused: it would match every pod in the namespace.
    """

    cel_rules = (
        CelRule(
            cel=(
                "(has(self.matchLabels) ? size(self.matchLabels) : 0)"
                " + (has(self.matchExpressions) ? size(self.matchExpressions) : 0) > 0"
            ),
            message=(
                "target.podSelector must set matchLabels or matchExpressions: an empty "
                "selector would profile every pod in the namespace"
            ),
            check=lambda selector: bool(selector.match_labels or selector.match_expressions),
        ),
    )

    match_labels: dict[StrictStr, StrictStr] = Field(
        default_factory=dict,
        max_length=32,
        description="Desired state. Labels a pod must carry, key to exact value. Default: none.",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list,
        max_length=32,
        description="Desired state. Set-based requirements a pod must meet. Default: none.",
    )


class Condition(ApiModel):
    """One aspect of the resource's observed state, in the meta/v1 Condition shape."""

    type: StrictStr = Field(
        max_length=316,
        pattern=CONDITION_TYPE_PATTERN,
        description=(
            "Observed state. What the condition is about, in CamelCase (for example Ready, "
            "Captured, Analyzed). Unique within the list."
        ),
    )
    status: Literal["True", "False", "Unknown"] = Field(
        description="Observed state. Whether the condition holds: True, False or Unknown."
    )
    observed_generation: int | None = Field(
        None,
        ge=0,
        description=(
            "Observed state. The metadata.generation of the spec this condition was set "
            "from; older than the object's generation means it is stale."
        ),
    )
    last_transition_time: datetime = Field(
        description="Observed state. When status last changed (RFC 3339, UTC)."
    )
    reason: StrictStr = Field(
        min_length=1,
        max_length=CONDITION_REASON_MAX_LENGTH,
        pattern=CONDITION_REASON_PATTERN,
        description=(
            "Observed state. Why status has its value, as a CamelCase word for programs "
            "(for example AgentsArmed, RankTimeout)."
        ),
    )
    message: BoundedText(CONDITION_MESSAGE_MAX_LENGTH) = Field(
        "",
        description=(
            "Observed state. Why status has its value, in words for people; clipped to 512 "
            "characters, ending in an ellipsis. Default: empty."
        ),
    )


def conditions_field() -> Any:
    """A status's `conditions`: at most MAX_CONDITIONS, one per type, merged by type on the
    server (a list-map, as Kubernetes API conventions ask)."""
    return Field(
        default_factory=list,
        max_length=MAX_CONDITIONS,
        description="Observed state. Standard conditions, one per type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
