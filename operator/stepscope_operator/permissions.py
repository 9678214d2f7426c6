"""Every Kubernetes API permission the operator needs, with the reason, in one declared list.

The chart's ``templates/rbac.yaml`` grants exactly these: ``tests/unit/chart`` fails when the
chart misses one of them or grants one that is not listed here, and the integration tests ask
the real API server (``kubectl auth can-i --as=<the chart's service account>``). Whoever adds an
API call to the operator adds its permission here and to the chart in the same change; a
target kind declares its own in its adapter (``stepscope_operator.targets.kinds``).

Scopes:

* ``watched``: where ProfileSessions live; a ClusterRole when the operator watches every
  namespace, a Role in the watched namespace otherwise.
* ``cluster``: always a ClusterRole (cluster-scoped resources, or discovery kopf needs).

The webhook needs nothing here: the chart owns its configuration and certificate.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from stepscope_operator.targets.kinds import TARGET_KINDS

Scope = Literal["watched", "cluster"]


class Permission(NamedTuple):
    api_group: str
    resource: str
    verbs: tuple[str, ...]
    scope: Scope
    reason: str


_OPERATOR_PERMISSIONS: tuple[Permission, ...] = (
    Permission(
        "stepscope.dev",
        "profilesessions",
        ("get", "list", "watch", "patch", "create", "delete"),
        "watched",
        "kopf watches sessions and patches their finalizer and progress annotations; the "
        "operator reads sessions to count the active ones and to resume after a restart; "
        "schedules create sessions and delete the ones past their history limit.",
    ),
    Permission(
        "stepscope.dev",
        "profilesessions/status",
        ("patch",),
        "watched",
        "Session phase, window, ranks and summary are written to the status subresource.",
    ),
    Permission(
        "stepscope.dev",
        "profileschedules",
        ("list", "watch", "patch"),
        "watched",
        "kopf runs a timer per schedule: it watches schedules and patches its annotations.",
    ),
    Permission(
        "stepscope.dev",
        "profileschedules/status",
        ("patch",),
        "watched",
        "Last run, baseline and regression verdict go to the schedule's status.",
    ),
    Permission(
        "stepscope.dev",
        "profiletriggers",
        ("list", "watch", "patch"),
        "watched",
        "kopf runs a timer per trigger: it watches triggers and patches their annotations.",
    ),
    Permission(
        "stepscope.dev",
        "profiletriggers/status",
        ("patch",),
        "watched",
        "Jobs watched, the last firing and the Ready condition go to the trigger's status.",
    ),
    Permission(
        "",
        "pods",
        ("list",),
        "watched",
        "Targets are resolved to pods by label selector, with their ranks, nodes and IPs.",
    ),
    Permission(
        "",
        "events",
        ("create",),
        "watched",
        "An Event at each phase change makes `kubectl describe` read as a story.",
    ),
    Permission(
        "batch",
        "jobs",
        ("create", "get", "delete"),
        "watched",
        "The merged trace and the report are built by an analysis Job in the session's "
        "namespace (the operator never reads a raw trace): created, read until it ends, and "
        "deleted when it overruns its deadline.",
    ),
    Permission(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("list", "watch"),
        "cluster",
        "kopf scans CRDs to notice when served resources change (without it, only at start).",
    ),
    Permission(
        "authentication.k8s.io",
        "tokenreviews",
        ("create",),
        "cluster",
        "The artifact endpoint asks the API server whose bearer token a caller presents.",
    ),
    Permission(
        "authorization.k8s.io",
        "subjectaccessreviews",
        ("create",),
        "cluster",
        "The artifact endpoint asks the API server whether that caller may get the session, "
        "so artifact links follow the cluster's RBAC exactly.",
    ),
)


# Each target kind declares what it reads (its adapter's `permissions`); its sessions, and
# so its jobs, live in the watched namespace(s).
TARGET_KIND_PERMISSIONS: tuple[Permission, ...] = tuple(
    Permission(need.api_group, need.resource, need.verbs, "watched", need.reason)
    for adapter in TARGET_KINDS.values()
    for need in adapter.permissions
)

REQUIRED_PERMISSIONS: tuple[Permission, ...] = _OPERATOR_PERMISSIONS + TARGET_KIND_PERMISSIONS


def required_grants(scope: Scope | None = None) -> set[tuple[str, str, str]]:
    """(api group, resource, verb) triples the operator needs, optionally of one scope."""
    return {
        (p.api_group, p.resource, verb)
        for p in REQUIRED_PERMISSIONS
        if scope is None or p.scope == scope
        for verb in p.verbs
    }
