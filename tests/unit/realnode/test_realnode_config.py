"""The real node's generated configuration: private network, every path under the instance."""

from __future__ import annotations

import ipaddress
import json
import random
import tomllib
from pathlib import Path

import pytest
from stepscope_dev.realnode import containerd, kubelet, network


def _strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def test_the_subnet_avoids_every_network_in_use():
    pool = list(network.POOL.subnets(new_prefix=24))
    free = pool[7]
    used = [net for net in pool if net != free]
    assert network.choose_subnet(used, random.Random(1)) == free
    with pytest.raises(RuntimeError, match="already in use"):
        network.choose_subnet(pool, random.Random(1))


def test_the_bridge_name_fits_an_interface_name():
    assert len(network.bridge_name("0123456789abcdef")) <= 15


def test_the_pod_network_is_host_only(tmp_path):
    subnet = ipaddress.ip_network("10.213.9.0/24")
    path = network.write_cni_config(tmp_path / "net.d", tmp_path / "ipam", "ssnabc", subnet)
    bridge = json.loads(path.read_text())["plugins"][0]
    # No gateway (the plugin would turn on ip_forward), no masquerading, no default route.
    assert bridge["isGateway"] is False and bridge["isDefaultGateway"] is False
    assert bridge["ipMasq"] is False
    (pod_range,) = bridge["ipam"]["ranges"][0]
    assert "gateway" not in pod_range and "routes" not in bridge["ipam"]
    # The bridge's own address (the node's) is never handed to a pod.
    assert ipaddress.ip_address(pod_range["rangeStart"]) > ipaddress.ip_address(
        network.host_address(subnet)
    )
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))


def test_containerd_keeps_its_state_under_the_instance(tmp_path):
    paths = containerd.ContainerdPaths(tmp_path / "node")
    containerd.write_config(paths, "localhost/stepscope/pause:x", Path("/usr/lib/cni"))
    config = tomllib.loads(paths.config.read_text())
    absolute = [s for s in _strings(config) if s.startswith("/")]
    outside = [s for s in absolute if not s.startswith(str(tmp_path)) and not s.startswith("/usr/")]
    assert outside == []
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["stream_server_address"] == "127.0.0.1"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False


def test_the_kubelet_serves_only_on_private_addresses_and_keeps_state_local(tmp_path):
    paths = kubelet.KubeletPaths(tmp_path / "node")
    ports = kubelet.write_config(
        paths,
        ca_cert=tmp_path / "ca.crt",
        runtime_socket=tmp_path / "containerd.sock",
        node_ip="10.213.9.1",
        cgroup_root="stepscope-abc",
        cluster_dns="10.213.9.1",
    )
    config = json.loads(paths.config.read_text())
    # Pods' nameserver is the node's CoreDNS on the bridge address, under the standard domain.
    assert config["clusterDNS"] == ["10.213.9.1"] and config["clusterDomain"] == "cluster.local"
    assert config["address"] == "10.213.9.1" and config["healthzBindAddress"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0 and config["authentication"]["anonymous"]["enabled"] is False
    assert {config["port"], config["healthzPort"]} == set(ports.values())
    # This VM has cgroup v1: kubelet >= 1.35 refuses it unless told otherwise.
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/stepscope-abc"
    paths_in_config = [s for s in _strings(config) if s.startswith("/")]
    assert [
        s for s in paths_in_config if s.startswith("/") and not s.startswith(str(tmp_path))
    ] == [
        "/stepscope-abc",
        "/etc/resolv.conf",
    ]
