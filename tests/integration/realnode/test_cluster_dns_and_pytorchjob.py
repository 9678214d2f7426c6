"""Cluster DNS on the real node, and a PyTorchJob that needs it, under the real training operator.

* A pod resolves, through the resolv.conf the kubelet wrote for it, a headless Service's short
  name (by the search path) to its endpoint pod's address, and
  ``kubernetes.default.svc.cluster.local`` to that Service's ClusterIP; the test also asks CoreDNS
  itself over UDP and TCP on the bridge address, and finds it listening nowhere else, refusing
  names outside the cluster (nothing is forwarded) and allowed only what its role grants.
* A 2-rank PyTorchJob (dev/demo/train_ddp.py from a ConfigMap) runs to Succeeded: the worker's
  init container waited until ``<job>-master-0`` resolved through CoreDNS, then both ranks
  trained with the host's torch from read-only mounts (``realnode.trainer_pods``). The master
  is held back (an init container waits for a file the test creates) until the worker's init
  container has logged that it is still waiting, so the wait itself is exercised.
"""

from __future__ import annotations

import json
import random
import re
import secrets
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from stepscope_dev.realnode import cluster_dns
from stepscope_dev.realnode.trainer_pods import real_node_pytorchjob
from stepscope_dev.training_operator import start_training_operator
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL
from support import wait_until
from support.tiny_pytorchjob import replica, trainer_config_map

POD_TIMEOUT_S = 300.0
JOB_TIMEOUT_S = 600.0
# Bounded: a name that never resolves fails the pod after RESOLVE_TRIES seconds.
# Bounded: the master's pod fails after 300 s if the test never opens the gate.
HOLD_SCRIPT = "for i in $(seq 300); do [ -e /gate/open ] && exit 0; sleep 1; done; exit 1"
PROBE_SCRIPT = """
import json, socket, sys, time

def addresses(name, tries):
    for attempt in range(tries):
        try:
            return sorted({info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)})
        except socket.gaierror as error:
            last = f"{type(error).__name__}: {error}"
            time.sleep(1)
    return last

report = {"resolv.conf": open("/etc/resolv.conf").read()}
for name in sys.argv[1:]:
    report[name] = addresses(name, 60)
report["outside"] = addresses("stepscope-no-such-host.example", 1)
print("REPORT " + json.dumps(report), flush=True)
"""


def _json(cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def _apply(cluster, *objects: dict) -> None:
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def _phase(cluster, namespace: str, pod: str) -> str | None:
    return _json(cluster, "pod", pod, "-n", namespace)["status"].get("phase")


def _trainer_pod(node, namespace: str, name: str, command: list[str], labels: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": node.images.trainer,
                    "imagePullPolicy": "Never",
                    "command": command,
                }
            ],
        },
    }


def _dns_query(address: str, name: str, *, tcp: bool) -> tuple[int, list[str]]:
    """Ask ``address`` port 53 for the A records of ``name``; returns the rcode and addresses."""
    ident = random.randrange(1 << 16)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    query = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", 1, 1)
    if tcp:
        with socket.create_connection((address, cluster_dns.DNS_PORT), timeout=10) as sock:
            sock.sendall(struct.pack("!H", len(query)) + query)
            length = struct.unpack("!H", sock.recv(2))[0]
            reply = b""
            while len(reply) < length:
                reply += sock.recv(length - len(reply))
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(10)
            sock.sendto(query, (address, cluster_dns.DNS_PORT))
            reply = sock.recv(4096)
    reply_id, flags, _, answers = struct.unpack("!HHHH", reply[:8])
    assert reply_id == ident
    offset = 12 + len(question) + 4
    found = []
    for _ in range(answers):
        offset = _after_name(reply, offset)
        rtype, _, _, size = struct.unpack("!HHIH", reply[offset : offset + 10])
        if rtype == 1:
            found.append(socket.inet_ntoa(reply[offset + 10 : offset + 10 + size]))
        offset += 10 + size
    return flags & 0xF, found


def _after_name(message: bytes, offset: int) -> int:
    """The offset after the (possibly compressed) domain name at ``offset``."""
    while message[offset]:
        if message[offset] & 0xC0 == 0xC0:  # a two-byte pointer ends the name
            return offset + 2
        offset += 1 + message[offset]
    return offset + 1


def _listening(pid: int) -> set[tuple[str, str]]:
    """(protocol, local address) of every socket ``pid`` listens on."""
    out = subprocess.run(
        ["ss", "-H", "-l", "-n", "-p", "-t", "-u"], capture_output=True, text=True, check=True
    ).stdout
    return {
        (line.split()[0], line.split()[4]) for line in out.splitlines() if f"pid={pid}," in line
    }


def test_a_pod_resolves_services_through_the_kubelets_resolv_conf(real_node_cluster):
    cluster, node = real_node_cluster
    namespace = f"realnode-dns-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", namespace)
    labels = {"stepscope.dev/dns-target": "yes"}
    target = _trainer_pod(
        node, namespace, "target", ["python", "-c", "import time; time.sleep(600)"], labels
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "target", "namespace": namespace},
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 80}]},
    }
    _apply(cluster, target, service)
    wait_until(
        lambda: _phase(cluster, namespace, "target") == "Running",
        POD_TIMEOUT_S,
        "the headless Service's pod running",
    )
    target_ip = _json(cluster, "pod", "target", "-n", namespace)["status"]["podIP"]

    def published() -> bool:
        slices = _json(
            cluster, "endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=target"
        )["items"]
        return any(
            target_ip in endpoint["addresses"]
            for item in slices
            for endpoint in item.get("endpoints") or []
        )

    wait_until(published, POD_TIMEOUT_S, "the target's address in the Service's EndpointSlice")

    names = [
        "target",
        f"target.{namespace}.svc.cluster.local",
        "kubernetes.default.svc.cluster.local",
    ]
    probe = _trainer_pod(node, namespace, "probe", ["python", "-c", PROBE_SCRIPT, *names], {})
    _apply(cluster, probe)
    wait_until(
        lambda: _phase(cluster, namespace, "probe") in ("Succeeded", "Failed"),
        POD_TIMEOUT_S,
        "the probe pod to finish",
    )
    log = cluster.kubectl("logs", "-n", namespace, "probe").stdout
    assert _phase(cluster, namespace, "probe") == "Succeeded", log
    report = json.loads(log.split("REPORT ", 1)[1].splitlines()[0])

    resolv = [line.split() for line in report["resolv.conf"].splitlines() if line.strip()]
    assert ["nameserver", node.address] in resolv
    assert [w for w in resolv if w[0] == "nameserver"] == [["nameserver", node.address]]
    (search,) = [w[1:] for w in resolv if w[0] == "search"]
    assert search[:3] == [f"{namespace}.svc.cluster.local", "svc.cluster.local", "cluster.local"]

    kubernetes_ip = _json(cluster, "service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    assert report["target"] == [target_ip]
    assert report[f"target.{namespace}.svc.cluster.local"] == [target_ip]
    assert report["kubernetes.default.svc.cluster.local"] == [kubernetes_ip]
    # Nothing is forwarded: a name outside the cluster does not resolve.
    assert isinstance(report["outside"], str) and "gaierror" in report["outside"]

    # CoreDNS itself, asked from the host on the bridge address, over UDP and TCP.
    for tcp in (False, True):
        assert _dns_query(node.address, f"target.{namespace}.svc.cluster.local", tcp=tcp) == (
            0,
            [target_ip],
        )
    refused = 5
    assert _dns_query(node.address, "example.com", tcp=False) == (refused, [])

    # It listens on the bridge address's port 53 only (and its readiness port on loopback).
    pid = cluster.pids[cluster_dns.COMPONENT]
    sockets = _listening(pid)
    dns_sockets = {s for s in sockets if not s[1].startswith("127.0.0.1:")}
    assert dns_sockets == {("udp", f"{node.address}:53"), ("tcp", f"{node.address}:53")}, sockets
    assert len(sockets - dns_sockets) == 1, sockets

    # Its identity may read what the kubernetes plugin watches, and nothing else.
    def can(verb: str, resource: str) -> str:
        result = cluster.kubectl(
            "auth", "can-i", verb, resource, "--as", cluster_dns.IDENTITY, check=False
        )
        return result.stdout.strip()

    assert can("watch", "endpointslices.discovery.k8s.io") == "yes"
    assert can("list", "services") == "yes"
    assert can("get", "secrets") == "no"
    assert can("create", "services") == "no"


@pytest.fixture(scope="module")
def training_operator_on_node(real_node_cluster):
    cluster, node = real_node_cluster
    start_training_operator(cluster, die_with_parent=True)
    return cluster, node


def _held_master(node, gate: Path) -> dict:
    """The master replica, held back by an init container until the test opens ``gate`` (a
    host directory, mounted read-only), so its name cannot resolve before then."""
    master = replica(23456)
    spec = master["template"]["spec"]
    spec["initContainers"] = [
        {
            "name": "hold",
            "image": node.images.base,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", HOLD_SCRIPT],
            "volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": True}],
        }
    ]
    spec["volumes"].append({"name": "gate", "hostPath": {"path": str(gate), "type": "Directory"}})
    return master


def test_a_two_rank_pytorchjob_succeeds_on_the_real_node(training_operator_on_node, tmp_path):
    cluster, node = training_operator_on_node
    namespace = f"realnode-ddp-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", namespace)
    gate = tmp_path / "gate"
    gate.mkdir()
    gate.chmod(0o755)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "tiny", "namespace": namespace},
        # Every pod has a network namespace of its own here, so the upstream default port fits.
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": _held_master(node, gate),
                "Worker": replica(23456),
            }
        },
    }
    config_map = trainer_config_map(namespace)
    made = real_node_pytorchjob(job, trainer_image=node.images.trainer, venv=Path(sys.prefix))
    _apply(cluster, config_map, made)

    def job_finished() -> dict | None:
        found = _json(cluster, "pytorchjob", "tiny", "-n", namespace)
        conditions = {c["type"]: c["status"] for c in found.get("status", {}).get("conditions", [])}
        done = conditions.get("Succeeded") == "True" or conditions.get("Failed") == "True"
        return found if done else None

    def logs(pod: str, container: str = "pytorch") -> str:
        result = cluster.kubectl("logs", "-n", namespace, pod, "-c", container, check=False)
        return (result.stdout + result.stderr)[-3000:]

    # While the master is held, the worker's init container keeps looking its name up.
    wait_until(
        lambda: (
            "init-pytorch: waiting for tiny-master-0 to resolve"
            in logs("tiny-worker-0", "init-pytorch")
        ),
        POD_TIMEOUT_S,
        "the worker's init container waiting for the master's name",
    )
    (gate / "open").touch()
    finished = wait_until(job_finished, JOB_TIMEOUT_S, "PyTorchJob tiny to finish")
    conditions = {c["type"]: c["status"] for c in finished["status"]["conditions"]}
    assert conditions.get("Succeeded") == "True", (
        logs("tiny-master-0"),
        logs("tiny-worker-0"),
        logs("tiny-worker-0", "init-pytorch"),
    )

    # The job succeeds with its master; the worker's own end may still be on its way.
    def pods_finished() -> list[dict] | None:
        pods = _json(cluster, "pods", "-n", namespace, "-l", f"{JOB_NAME_LABEL}=tiny")["items"]
        done = all(p["status"].get("phase") in ("Succeeded", "Failed") for p in pods)
        return pods if pods and done else None

    pods = {
        p["metadata"]["name"]: p
        for p in wait_until(pods_finished, POD_TIMEOUT_S, "both pods of tiny to end")
    }
    assert set(pods) == {"tiny-master-0", "tiny-worker-0"}
    for pod in pods.values():
        assert pod["spec"]["nodeName"] == node.name
        assert pod["status"]["phase"] == "Succeeded", pod["status"]

    worker = pods["tiny-worker-0"]
    (init,) = worker["status"]["initContainerStatuses"]
    assert init["name"] == "init-pytorch"
    assert worker["spec"]["initContainers"][0]["image"] == node.images.base
    assert init["state"]["terminated"]["exitCode"] == 0
    # It ended because the master's name resolved through CoreDNS: getent printed the master
    # pod's address under the Service's cluster name, found by the search path.
    init_log = logs("tiny-worker-0", "init-pytorch")
    master_ip = pods["tiny-master-0"]["status"]["podIP"]
    assert "init-pytorch: tiny-master-0 resolved" in init_log
    assert init_log.rindex("waiting for tiny-master-0") < init_log.index("tiny-master-0 resolved")
    assert re.search(
        rf"^{re.escape(master_ip)}\s+tiny-master-0\.{namespace}\.svc\.cluster\.local(\s|$)",
        init_log,
        re.MULTILINE,
    ), init_log
    assert "done: 20 steps on 2 ranks" in logs("tiny-master-0")
