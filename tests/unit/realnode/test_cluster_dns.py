"""The real node's cluster DNS configuration, and the workers' init containers that use it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from stepscope_dev import build, training_operator, versions
from stepscope_dev.realnode import cluster_dns
from stepscope_dev.realnode.images import base_reference


def _directives(corefile: str) -> list[list[str]]:
    lines = (line.split("#", 1)[0].split() for line in corefile.splitlines())
    return [words for words in lines if words]


def test_coredns_serves_only_the_cluster_zones_on_the_bridge_address_and_forwards_nothing():
    text = cluster_dns.corefile("10.213.9.1", Path("/i/node/coredns/kubeconfig"), "ctx", 4242)
    directives = _directives(text)
    # One server block, for the cluster's zones only: other names are refused, not forwarded.
    assert directives[0] == ["cluster.local:53", "in-addr.arpa:53", "{"]
    assert [d for d in directives if d[-1] == "{" and ":" in d[0]] == [directives[0]]
    assert ["bind", "10.213.9.1"] in directives
    assert ["ready", "127.0.0.1:4242"] in directives
    plugins = {d[0] for d in directives}
    assert not plugins & {"forward", "proxy", "health", "prometheus", "pprof"}
    assert ["kubernetes", "cluster.local", "in-addr.arpa", "{"] in directives
    assert ["kubeconfig", "/i/node/coredns/kubeconfig", "ctx"] in directives


def test_coredns_may_only_list_and_watch_what_its_kubernetes_plugin_reads():
    role, binding = cluster_dns.rbac_objects()
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        (group, resource, verb)
        for group, resource in (
            ("", "services"),
            ("", "pods"),
            ("", "namespaces"),
            ("discovery.k8s.io", "endpointslices"),
        )
        for verb in ("list", "watch")
    }
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cluster_dns.IDENTITY}
    ]


def test_coredns_is_built_from_its_pinned_module_with_the_node():
    (recipe,) = [r for r in build.node_recipes() if r.name == "coredns"]
    assert recipe.module == "github.com/coredns/coredns" and recipe.version == versions.COREDNS
    assert list(recipe.packages.values()) == [cluster_dns.BINARY]


class _Cluster:
    def __init__(self, real_node: dict) -> None:
        self.real_node = real_node


def test_the_training_operator_picks_the_dns_wait_only_for_a_real_node():
    real = training_operator.init_container_for(_Cluster({"bridge": "ssnabc"}))
    assert real.template == training_operator.DNS_INIT_CONTAINER_TEMPLATE
    assert real.image == base_reference()
    assert training_operator.init_container_for(_Cluster({})) == (
        training_operator.POD_RUNNER_INIT_CONTAINER
    )
    assert f"--pytorch-init-container-image={base_reference()}" in real.flags()


def _rendered_wait(max_tries: int) -> list[str]:
    """The DNS template's container with the operator's values (a job's names never hold the
    characters html/template would escape)."""
    import yaml

    text = training_operator.DNS_INIT_CONTAINER_TEMPLATE.read_text()
    for field, value in (
        ("{{.InitContainerImage}}", "base"),
        ("{{.MasterAddr}}", "tiny-master-0"),
        ("{{.MaxTries}}", str(max_tries)),
    ):
        text = text.replace(field, value)
    assert "{{" not in text
    (container,) = yaml.safe_load(text)
    assert container["name"] == "init-pytorch"
    return container["command"]


def _fake_getent(tmp_path: Path, exit_code: int) -> dict[str, str]:
    # Stands in for the resolver only: the loop around it is what runs for real.
    script = tmp_path / "getent"
    script.write_text(f'#!/bin/sh\necho "getent $*" >> {tmp_path}/calls\nexit {exit_code}\n')
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}


def test_the_worker_init_container_waits_a_bounded_number_of_tries(tmp_path):
    command = _rendered_wait(max_tries=2)
    failed = subprocess.run(
        command,
        env=_fake_getent(tmp_path, 2),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert failed.returncode == 1
    assert "tiny-master-0 did not resolve after 2 tries" in failed.stdout
    assert (tmp_path / "calls").read_text().splitlines() == ["getent hosts tiny-master-0"] * 2


def test_the_worker_init_container_ends_once_the_name_resolves(tmp_path):
    done = subprocess.run(
        _rendered_wait(max_tries=5),
        env=_fake_getent(tmp_path, 0),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and "tiny-master-0 resolved" in done.stdout
