"""The declared permissions (stepscope_operator.permissions) are checked against the code:
every API call the operator makes, found by reading it, needs a declared permission, and every
declared permission is used by something.

Two sources of API calls: kopf's registry (a handler on a resource makes kopf list, watch and
patch it) and the operator's direct kubernetes-client calls, found in its source by method name
(``list_namespaced_pod``, ``patch_namespaced_custom_object_status``, ...).
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import kopf
import kubernetes.client
import pytest
import stepscope_operator
from stepscope_operator import handlers  # noqa: F401  (registers the operator's kopf handlers)
from stepscope_operator.permissions import REQUIRED_PERMISSIONS, required_grants

PACKAGE_DIR = Path(stepscope_operator.__file__).parent
VERB_PREFIXES = {
    "read": "get",
    "get": "get",
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete_collection": "deletecollection",
    "delete": "delete",
}
CUSTOM_OBJECT = "custom_object"


def client_methods() -> set[str]:
    """Every API method of the kubernetes client, e.g. CoreV1Api.list_namespaced_pod."""
    methods = set()
    for name, cls in inspect.getmembers(kubernetes.client, inspect.isclass):
        if name.endswith("Api") and name != "ApiClient":
            methods |= {
                m for m in vars(cls) if not m.startswith("_") and not m.endswith("_with_http_info")
            }
    return methods


def api_groups_of(method: str) -> set[str]:
    """The API groups of the client classes that define `method`: CoreV1Api is the core
    group "", BatchV1Api is "batch" (CustomObjectsApi names its group in an argument)."""
    groups = set()
    for name, cls in inspect.getmembers(kubernetes.client, inspect.isclass):
        match = re.fullmatch(r"(?P<group>[A-Z][a-z]*?)V\d+\w*Api", name)
        if match and method in vars(cls):
            group = match["group"].lower()
            groups.add("" if group == "core" else group)
    return groups


def referenced_client_methods() -> dict[str, str]:
    """Client API methods the operator's modules call or pass (to asyncio.to_thread), by name ->
    the module that does."""
    known = client_methods()
    found: dict[str, str] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in known:
                found.setdefault(node.attr, path.name)
    return found


def permission_of(method: str) -> tuple[str, str, bool]:
    """(verb, resource, is_status) of a client method; resource is CUSTOM_OBJECT for the
    CustomObjectsApi, whose resource is an argument."""
    for prefix, verb in VERB_PREFIXES.items():  # noqa: B007 - the verb found is returned
        if method.startswith(prefix + "_"):
            rest = method[len(prefix) + 1 :]
            break
    else:
        raise AssertionError(f"no verb for client method {method}")
    is_status = rest.endswith("_status")
    rest = re.sub(r"_status$|_for_all_namespaces$", "", rest)
    rest = re.sub(r"^(namespaced_|cluster_)", "", rest)
    if rest == CUSTOM_OBJECT:
        return verb, CUSTOM_OBJECT, is_status
    plural = rest.replace("_", "")
    return verb, plural if plural.endswith("s") else plural + "s", is_status


def kopf_needs() -> set[tuple[str, str, str]]:
    registry = kopf.get_default_registry()
    needs = set()
    for part in (registry._watching, registry._changing, registry._spawning, registry._indexing):
        for handler in part.get_all_handlers():
            selector = handler.selector
            plural = selector.plural or selector.any_name
            for verb in ("list", "watch", "patch"):
                needs.add((selector.group or "", plural, verb))
    return needs


def test_kopf_handlers_are_covered():
    needs = kopf_needs()
    assert needs, "no kopf handlers found: did stepscope_operator.handlers stop registering?"
    missing = needs - required_grants()
    assert not missing, f"kopf needs these for the operator's handlers: {sorted(missing)}"


def test_direct_client_calls_are_covered():
    calls = referenced_client_methods()
    assert calls, "found no kubernetes client calls in stepscope_operator"
    declared = required_grants()
    missing = []
    for method, module in calls.items():
        verb, resource, is_status = permission_of(method)
        if resource == CUSTOM_OBJECT:
            covered = any(
                group and (res.endswith("/status") == is_status) and v == verb
                for group, res, v in declared
            )
        else:
            full = f"{resource}/status" if is_status else resource
            # A typed API class names its group in short ("authentication" for
            # AuthenticationV1Api); the declared group is the full one (authentication.k8s.io).
            groups = api_groups_of(method)
            covered = any(
                res == full and v == verb and (group in groups or group.split(".", 1)[0] in groups)
                for group, res, v in declared
            )
        if not covered:
            missing.append(f"{module}: {method} needs {verb} {resource}")
    assert not missing, "undeclared API calls: " + "; ".join(missing)


def operator_source() -> str:
    return "\n".join(p.read_text() for p in PACKAGE_DIR.rglob("*.py") if p.name != "permissions.py")


@pytest.mark.parametrize(
    "permission", REQUIRED_PERMISSIONS, ids=lambda p: f"{p.api_group or 'core'}/{p.resource}"
)
def test_every_declared_permission_is_used(permission):
    base = permission.resource.split("/")[0]
    kopf_resources = {plural for _, plural, _ in kopf_needs()}
    direct = {permission_of(m) for m in referenced_client_methods()}
    grouped = {
        (verb, res)
        for m in referenced_client_methods()
        if permission.api_group in api_groups_of(m)
        for verb, res, _ in [permission_of(m)]
    }
    if permission.api_group and all((verb, base) in grouped for verb in permission.verbs):
        pass  # called directly through the group's client (BatchV1Api for batch/jobs)
    elif permission.api_group == "apiextensions.k8s.io":
        # kopf's resource scanning, on unless the operator turns it off.
        assert "scanning.disabled = True" not in operator_source()
    elif permission.api_group:
        direct_resources = {res for _, res, _ in direct}
        assert (
            base in kopf_resources or base in direct_resources or f'"{base}"' in operator_source()
        ), f"nothing in stepscope_operator uses {permission.api_group}/{base}"
    else:
        used = {(verb, res) for verb, res, _ in direct}
        assert all((verb, base) in used for verb in permission.verbs), (
            f"declared {permission.verbs} on {base}, the code uses {sorted(used)}"
        )


def test_client_classes_map_to_their_api_groups():
    assert api_groups_of("create_namespaced_job") == {"batch"}
    assert api_groups_of("list_namespaced_pod") == {""}


def test_the_method_reader_understands_client_names():
    assert permission_of("list_namespaced_pod") == ("list", "pods", False)
    assert permission_of("create_namespaced_event") == ("create", "events", False)
    assert permission_of("read_namespaced_config_map") == ("get", "configmaps", False)
    assert permission_of("patch_namespaced_custom_object_status") == ("patch", CUSTOM_OBJECT, True)
    assert permission_of("list_cluster_custom_object") == ("list", CUSTOM_OBJECT, False)
    assert permission_of("delete_collection_namespaced_pod") == ("deletecollection", "pods", False)
