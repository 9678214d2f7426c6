"""Versioned pydantic models: the CRDs and the agent wire contract.

The custom resources (group ``stepscope.dev``, version ``v1alpha1``) are `ProfileSession`
and `ProfileSchedule`; ``crds/*.yaml`` is generated from them by
``python -m stepscope.api.crdgen`` (``make crds``). The agent contract is
`stepscope.api.agent`, imported on its own.
"""

from stepscope.api.schedule import ProfileSchedule, ProfileScheduleSpec, ProfileScheduleStatus
from stepscope.api.session import (
    API_VERSION,
    GROUP,
    VERSION,
    ProfileSession,
    ProfileSessionSpec,
    TargetKind,
    describe_target,
)
from stepscope.api.session_status import ProfileSessionStatus

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "ProfileSchedule",
    "ProfileScheduleSpec",
    "ProfileScheduleStatus",
    "ProfileSession",
    "ProfileSessionSpec",
    "ProfileSessionStatus",
    "TargetKind",
    "describe_target",
]
