"""How the local pod runner turns a container spec into a process environment (no cluster)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from stepscope_dev.podenv import (
    NotReadyYet,
    PodSpecError,
    container_env,
    expand_references,
    field_value,
    parse_pod_host,
    parse_service_host,
    process_argv,
    resolve_executable,
    resolve_service_addresses,
    rewrite_mount_paths,
)


class Objects:
    """The API objects a pod refers to, as the runner's PodApi would return them."""

    def __init__(self, secrets=None, config_maps=None, services=None, hostnames=None):
        self.secrets = secrets or {}
        self.config_maps = config_maps or {}
        self.services = services or {}
        self.hostnames = hostnames or {}

    def secret_data(self, namespace, name):
        return self.secrets.get((namespace, name))

    def config_map_data(self, namespace, name):
        return self.config_maps.get((namespace, name))

    def service_address(self, namespace, name):
        return self.services.get((namespace, name))

    def pod_hostname_address(self, namespace, subdomain, hostname):
        return self.hostnames.get((namespace, subdomain, hostname))


POD = {
    "metadata": {
        "name": "job-worker-0",
        "namespace": "team-a",
        "uid": "u-1",
        "labels": {"training.kubeflow.org/replica-index": "0"},
    },
    "spec": {"nodeName": "stepscope-local-0", "serviceAccountName": "default"},
    "status": {"podIP": "127.0.0.7", "podIPs": [{"ip": "127.0.0.7"}], "hostIP": "127.0.0.1"},
}


def test_downward_api_fields_read_the_pod():
    assert field_value(POD, "metadata.name") == "job-worker-0"
    assert field_value(POD, "status.podIP") == "127.0.0.7"
    assert field_value(POD, "spec.nodeName") == "stepscope-local-0"
    assert field_value(POD, "metadata.labels['training.kubeflow.org/replica-index']") == "0"
    with pytest.raises(PodSpecError, match="spec.containers"):
        field_value(POD, "spec.containers")


def test_references_expand_like_the_kubelet():
    env = {"A": "1"}
    assert expand_references("$(A)-$(B)-$$(A)", env) == "1-$(B)-$(A)"


def test_env_resolves_every_source_in_order():
    objects = Objects(
        secrets={("team-a", "token"): {"value": "s3cret"}},
        config_maps={("team-a", "settings"): {"MODE": "fast", "LEVEL": "2"}},
    )
    container = {
        "name": "pytorch",
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "value"}}},
            {
                "name": "OPTIONAL",
                "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "x", "optional": True}},
            },
            {"name": "URL", "value": "http://$(POD_IP):9464/$(CFG_MODE)"},
        ],
    }
    env = container_env(POD, container, objects)
    assert env == {
        "CFG_MODE": "fast",
        "CFG_LEVEL": "2",
        "POD_IP": "127.0.0.7",
        "TOKEN": "s3cret",
        "URL": "http://127.0.0.7:9464/fast",
    }


def test_a_missing_required_secret_waits():
    container = {
        "name": "c",
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k"}}}],
    }
    with pytest.raises(NotReadyYet, match="team-a/later"):
        container_env(POD, container, Objects())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("job-master-0", ("job-master-0", "team-a")),
        ("job-master-0.other", ("job-master-0", "other")),
        ("job-master-0.other.svc.cluster.local", ("job-master-0", "other")),
        ("127.0.0.3", None),
        ("localhost", None),
        ("example.com.au.x", None),
    ],
)
def test_service_host_names_are_recognised(value, expected):
    assert parse_service_host(value, "team-a") == expected


def test_master_addr_becomes_the_master_pod_address():
    env = {"MASTER_ADDR": "job-master-0", "OTHER": "job-master-0"}
    objects = Objects(services={("team-a", "job-master-0"): "127.0.0.2"})
    assert resolve_service_addresses(env, "team-a", objects) == {
        "MASTER_ADDR": "127.0.0.2",
        "OTHER": "job-master-0",
    }
    with pytest.raises(NotReadyYet, match="job-master-0"):
        resolve_service_addresses(env, "team-a", Objects())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("tj-node-0-0.tj", ("tj-node-0-0", "tj", "team-a")),
        ("tj-node-0-0.tj.other", ("tj-node-0-0", "tj", "other")),
        ("tj-node-0-0.tj.other.svc.cluster.local", ("tj-node-0-0", "tj", "other")),
        ("job-master-0.other.svc", None),
        ("job-master-0", None),
        ("127.0.0.3", None),
        ("a.b.c.d.e.f", None),
    ],
)
def test_pod_host_names_are_recognised(value, expected):
    assert parse_pod_host(value, "team-a") == expected


def test_a_pod_hostname_resolves_before_a_service_of_that_name():
    # Kubeflow Trainer points PET_MASTER_ADDR at the first JobSet pod: <trainjob>-node-0-0.<trainjob>.
    env = {"PET_MASTER_ADDR": "tj-node-0-0.tj"}
    pod = Objects(hostnames={("team-a", "tj", "tj-node-0-0"): "127.0.0.7"})
    assert resolve_service_addresses(env, "team-a", pod) == {"PET_MASTER_ADDR": "127.0.0.7"}
    # With no such pod, "a.b" is Service a in namespace b, as the DNS search path goes on.
    service = Objects(services={("tj", "tj-node-0-0"): "127.0.0.8"})
    assert resolve_service_addresses(env, "team-a", service) == {"PET_MASTER_ADDR": "127.0.0.8"}
    with pytest.raises(NotReadyYet, match="hostname tj-node-0-0 of subdomain team-a/tj"):
        resolve_service_addresses(env, "team-a", Objects())


def test_mount_paths_are_rewritten_where_they_start_a_path():
    mounts = {
        "/var/run/stepscope": Path("/data/p/volumes/shared"),
        "/var/run/stepscope/hook": Path("/data/p/volumes/hook"),
    }
    assert (
        rewrite_mount_paths("/var/run/stepscope/hook:/app", mounts) == "/data/p/volumes/hook:/app"
    )
    assert (
        rewrite_mount_paths("--dir=/var/run/stepscope/traces", mounts)
        == "--dir=/data/p/volumes/shared/traces"
    )
    assert rewrite_mount_paths("/var/run/stepscopeX", mounts) == "/var/run/stepscopeX"
    assert rewrite_mount_paths("x/var/run/stepscope", mounts) == "x/var/run/stepscope"


def test_python_runs_this_interpreter_and_commands_are_required():
    assert resolve_executable("python3", "/usr/bin") == sys.executable
    assert resolve_executable("sh", "/usr/bin:/bin").endswith("/sh")
    assert process_argv({"name": "c", "command": ["python"], "args": ["$(X)"]}, {"X": "1"}) == [
        "python",
        "1",
    ]
    with pytest.raises(PodSpecError, match="command"):
        process_argv({"name": "c", "args": ["x"]}, {})
    with pytest.raises(PodSpecError, match="not on PATH"):
        resolve_executable("no-such-program-here", "/usr/bin")
