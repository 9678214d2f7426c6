"""Each pod gets its own loopback address, and Service names resolve to it like cluster DNS."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from harness_kube import pod_in_phase, python_pod
from support import wait_until

pytestmark = pytest.mark.integration

SERVE_ON_POD_IP = (
    "import os, socket, time\n"
    "server = socket.create_server((os.environ['POD_IP'], 8080))\n"
    "while True:\n"
    "    connection, _ = server.accept()\n"
    "    connection.sendall(os.environ['HOSTNAME'].encode()); connection.close()\n"
)


def _ask(address: str) -> str:
    with socket.create_connection((address, 8080), timeout=5) as connection:
        return connection.recv(100).decode()


def test_each_pod_has_its_own_address_and_port_space(local_cluster, namespace, apply):
    names = [f"server-{i}" for i in range(3)]
    apply(*(python_pod(name, namespace, SERVE_ON_POD_IP) for name in names))
    pods = [
        wait_until(
            lambda n=name: pod_in_phase(local_cluster, namespace, n, "Running"),
            timeout=60,
            what=f"pod {name} to run",
        )
        for name in names
    ]
    addresses = [pod["status"]["podIP"] for pod in pods]
    assert len(set(addresses)) == 3
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("127.0.0.0/8") for a in addresses)
    assert all(pod["status"]["podIPs"] == [{"ip": pod["status"]["podIP"]}] for pod in pods)
    # All three listen on port 8080, each on its own address.
    answers = {
        address: wait_until(
            lambda a=address: _try_ask(a), timeout=20, what=f"a server on {address}:8080"
        )
        for address in addresses
    }
    assert answers == dict(zip(addresses, names, strict=True))


def _try_ask(address: str) -> str | None:
    try:
        return _ask(address)
    except OSError:
        return None


def test_master_addr_naming_a_service_reaches_the_pod_behind_it(local_cluster, namespace, apply):
    server = python_pod("master", namespace, SERVE_ON_POD_IP)
    server["metadata"]["labels"] = {"role": "master"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "job-master-0", "namespace": namespace},
        "spec": {"clusterIP": "None", "selector": {"role": "master"}, "ports": [{"port": 8080}]},
    }
    client = python_pod(
        "client",
        namespace,
        (
            "import os, socket\n"
            "answer = socket.create_connection((os.environ['MASTER_ADDR'], 8080), timeout=30).recv(100)\n"
            "assert answer == b'master', answer\n"
            "print('reached', os.environ['MASTER_ADDR'])"
        ),
        env=[{"name": "MASTER_ADDR", "value": "job-master-0"}],
        restartPolicy="OnFailure",
    )
    # The client comes first: it must wait until the Service has a pod with an address.
    apply(client, service)
    apply(server)
    master = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "master", "Running"),
        timeout=60,
        what="pod master to run",
    )
    finished = wait_until(
        lambda: pod_in_phase(local_cluster, namespace, "client", "Succeeded"),
        timeout=90,
        what="pod client to reach the master",
    )
    env_of_client = finished["spec"]["containers"][0]["env"]
    assert {"name": "MASTER_ADDR", "value": "job-master-0"} in env_of_client
    assert master["status"]["podIP"] != finished["status"]["podIP"]
