"""Least privilege, checked: the chart grants every permission the operator declares it needs
(stepscope_operator.permissions) and nothing else."""

import pytest
from chart_rendering import NAMESPACE, by_kind, granted, render
from stepscope_operator.permissions import REQUIRED_PERMISSIONS, required_grants
from stepscope_operator.targets.kinds import TARGET_KINDS


def split_by_scope(grants):
    cluster_wide = set().union(*(g for k, g in grants.items() if k.startswith("ClusterRole/")))
    namespaced = set().union(*(g for k, g in grants.items() if k.startswith("Role/")))
    return cluster_wide, namespaced


def test_cluster_wide_install_grants_exactly_what_the_operator_needs(tmp_path):
    grants = granted(render(None, tmp_path))
    cluster_wide, namespaced = split_by_scope(grants)
    assert namespaced == set()
    required = required_grants()
    missing = required - cluster_wide
    unused = cluster_wide - required
    assert not missing, f"the operator needs grants the chart lacks: {sorted(missing)}"
    assert not unused, f"the chart grants what nothing uses: {sorted(unused)}"


def test_namespaced_install_keeps_watched_rules_in_a_role(tmp_path):
    objects = render({"operator": {"watchNamespace": "team-a"}}, tmp_path)
    cluster_wide, namespaced = split_by_scope(granted(objects))
    assert namespaced == required_grants("watched")
    assert cluster_wide == required_grants("cluster")
    [role] = by_kind(objects, "Role")
    assert role["metadata"]["namespace"] == "team-a"
    [binding] = by_kind(objects, "RoleBinding")
    assert binding["metadata"]["namespace"] == "team-a"


def test_every_binding_binds_only_the_charts_service_account(tmp_path):
    objects = render(None, tmp_path)
    [account] = by_kind(objects, "ServiceAccount")
    bindings = by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding")
    role_names = {r["metadata"]["name"] for r in by_kind(objects, "ClusterRole")}
    assert bindings
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
        ]
        assert binding["roleRef"]["name"] in role_names


def test_no_wildcards_and_no_secret_or_webhook_access(tmp_path):
    for triples in granted(render(None, tmp_path)).values():
        for group, resource, verb in triples:
            assert "*" not in (group, resource, verb)
            assert resource not in ("secrets", "mutatingwebhookconfigurations")


@pytest.mark.parametrize(
    "adapter", [a for a in TARGET_KINDS.values() if a.permissions], ids=lambda a: a.kind.value
)
@pytest.mark.parametrize("watch_namespace", [None, "team-a"])
def test_every_target_kind_reads_its_job_under_the_charts_rules(adapter, watch_namespace, tmp_path):
    values = {"operator": {"watchNamespace": watch_namespace}} if watch_namespace else None
    cluster_wide, namespaced = split_by_scope(granted(render(values, tmp_path)))
    where = namespaced if watch_namespace else cluster_wide
    for need in adapter.permissions:
        for verb in need.verbs:
            assert (need.api_group, need.resource, verb) in where, (
                f"charts/stepscope/templates/rbac.yaml must grant {verb} on "
                f"{need.resource}.{need.api_group} for {adapter.kind.value} targets"
            )


@pytest.mark.parametrize("permission", REQUIRED_PERMISSIONS, ids=lambda p: p.resource)
def test_declared_permissions_say_why(permission):
    assert permission.reason.endswith(".") and len(permission.reason) > 20
    assert permission.verbs and len(set(permission.verbs)) == len(permission.verbs)


def test_rbac_can_be_left_to_the_platform_team(tmp_path):
    objects = render({"rbac": {"create": False}}, tmp_path)
    assert granted(objects) == {}
