"""An injected training pod on the real node: what the runtime enforces, not what the spec says.

The pod is what our webhook makes of a trainer pod (``build_injection_patch`` applied to it), in
a namespace that enforces the restricted Pod Security Standard, with the agent and trainer images
built from our Dockerfiles. The checks read the kernel's view of each container's process
(``/proc/<pid>/status`` on the host, found through containerd), the files the two users share
in the emptyDir, and the containers' start order and end as the kubelet reports them.
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import jsonpatch
import pytest
from stepscope_dev.realnode.containerd import container_pids
from stepscope_dev.realnode.images import trainer_host_mounts
from stepscope_operator.admission.injection import (
    INJECT_LABEL,
    InjectionSettings,
    build_injection_patch,
)
from stepscope_operator.agents.contract import (
    AGENT_CONTAINER_NAME,
    AGENT_UID,
    HOOK_INSTALL_CONTAINER_NAME,
    SHARED_MOUNT_PATH,
)
from stepscope_operator.agents.signing import AgentKeyring
from support import wait_until

TRAINER_UID = 1000
POD_TIMEOUT_S = 300.0
# Bounded by design: the trainer gives up (exit 3) if the test never releases it.
TRAINER_SCRIPT = f"""
import json, os, pathlib, socket, sys, time
shared = pathlib.Path(os.environ["STEPSCOPE_AGENT_DIR"])
report = {{"uid": os.getuid(), "hook_at_start": (shared / "hook" / "sitecustomize.py").exists()}}
sock_path = shared / "agent.sock"
deadline = time.monotonic() + {POD_TIMEOUT_S}
while not sock_path.exists() and time.monotonic() < deadline:
    time.sleep(0.2)
try:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(sock_path))
    report["agent_socket"] = "connected"
except OSError as error:
    report["agent_socket"] = repr(error)
(shared / "from-trainer.txt").write_text(f"written by uid {{os.getuid()}}")
print("REPORT " + json.dumps(report), flush=True)
while not (shared / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.2)
sys.exit(0 if (shared / "release").exists() else 3)
"""


def _restricted_namespace(cluster) -> str:
    name = f"realnode-{secrets.token_hex(3)}"
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "labels": {
                        "pod-security.kubernetes.io/enforce": "restricted",
                        "pod-security.kubernetes.io/enforce-version": "latest",
                    },
                },
            }
        ),
    )
    return name


def _injected_pod(node, namespace: str) -> dict:
    trainer_security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace, "labels": {INJECT_LABEL: "true"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": TRAINER_UID,
                "runAsGroup": TRAINER_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "pytorch",
                    "image": node.images.trainer,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", TRAINER_SCRIPT],
                    "securityContext": trainer_security,
                }
            ],
        },
    }
    settings = InjectionSettings(
        agent_image=node.images.agent,
        image_pull_policy="Never",
        trusted_keys=AgentKeyring.generate().trusted_keys_text(),
        storage_endpoint=node.s3_endpoint,
    )
    return jsonpatch.apply_patch(pod, build_injection_patch(pod, {}, settings))


def _pod(cluster, namespace: str) -> dict:
    return json.loads(
        cluster.kubectl("get", "pod", "trainer", "-n", namespace, "-o", "json").stdout
    )


def _statuses(pod: dict) -> dict[str, dict]:
    status = pod.get("status") or {}
    entries = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    return {entry["name"]: entry for entry in entries}


def _proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _exec(cluster, namespace: str, container: str, *argv: str) -> str:
    return cluster.kubectl("exec", "-n", namespace, "trainer", "-c", container, "--", *argv).stdout


@pytest.fixture(scope="module")
def running_pod(real_node_cluster):
    cluster, node = real_node_cluster
    namespace = _restricted_namespace(cluster)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_injected_pod(node, namespace)))

    def trainer_running() -> bool:
        trainer = _statuses(_pod(cluster, namespace)).get("pytorch", {})
        if "terminated" in trainer.get("state", {}):
            raise AssertionError(f"trainer ended before the checks: {trainer}")
        return "running" in trainer.get("state", {})

    wait_until(
        trainer_running, POD_TIMEOUT_S, "the injected pod's trainer running on the real node"
    )
    return cluster, node, namespace


def test_the_runtime_enforces_the_injected_security_context(running_pod):
    cluster, node, namespace = running_pod
    statuses = _statuses(_pod(cluster, namespace))
    pids = container_pids(node.containerd)
    for name, uid in ((AGENT_CONTAINER_NAME, AGENT_UID), ("pytorch", TRAINER_UID)):
        container_id = statuses[name]["containerID"].removeprefix("containerd://")
        fields = _proc_status(pids[container_id])
        assert fields["Uid"].split() == [str(uid)] * 4, (name, fields["Uid"])
        assert fields["Gid"].split() == [str(uid)] * 4, (name, fields["Gid"])
        assert fields["NoNewPrivs"] == "1", (name, "privilege escalation is not blocked")
        for capability_set in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
            assert int(fields[capability_set], 16) == 0, (
                name,
                capability_set,
                fields[capability_set],
            )
        # 2: a seccomp filter is in force (RuntimeDefault).
        assert fields["Seccomp"] == "2", (name, fields["Seccomp"])


def test_the_sidecar_reads_what_the_trainer_wrote_and_the_order_is_native(running_pod):
    cluster, _, namespace = running_pod
    wait_until(
        lambda: (
            "REPORT " in cluster.kubectl("logs", "-n", namespace, "trainer", "-c", "pytorch").stdout
        ),
        POD_TIMEOUT_S,
        "the trainer's report",
    )
    log = cluster.kubectl("logs", "-n", namespace, "trainer", "-c", "pytorch").stdout
    report = json.loads(log.split("REPORT ", 1)[1].splitlines()[0])
    # The hook-install init container had finished before the trainer's Python started, and the
    # trainer (another user) could connect to the socket the sidecar made.
    assert report == {"uid": TRAINER_UID, "hook_at_start": True, "agent_socket": "connected"}

    assert _exec(cluster, namespace, AGENT_CONTAINER_NAME, "id", "-u").strip() == str(AGENT_UID)
    shared_file = f"{SHARED_MOUNT_PATH}/from-trainer.txt"
    assert _exec(cluster, namespace, AGENT_CONTAINER_NAME, "cat", shared_file) == (
        f"written by uid {TRAINER_UID}"
    )

    statuses = _statuses(_pod(cluster, namespace))
    installed = statuses[HOOK_INSTALL_CONTAINER_NAME]["state"]["terminated"]
    assert installed["exitCode"] == 0
    sidecar_started = statuses[AGENT_CONTAINER_NAME]["state"]["running"]["startedAt"]
    trainer_started = statuses["pytorch"]["state"]["running"]["startedAt"]
    # RFC 3339 UTC stamps of one format compare as strings.
    assert installed["finishedAt"] <= sidecar_started <= trainer_started

    # Releasing the trainer ends the pod: a native sidecar does not keep it running.
    _exec(cluster, namespace, AGENT_CONTAINER_NAME, "touch", f"{SHARED_MOUNT_PATH}/release")
    wait_until(
        lambda: _pod(cluster, namespace)["status"].get("phase") in ("Succeeded", "Failed"),
        POD_TIMEOUT_S,
        "the pod to finish after its trainer",
    )
    final = _pod(cluster, namespace)
    assert final["status"]["phase"] == "Succeeded", final["status"]
    assert "terminated" in _statuses(final)[AGENT_CONTAINER_NAME]["state"]


TORCH_SCRIPT = """
import json, os, sys, torch
try:
    open(os.path.join(sys.prefix, "written-by-a-pod"), "w")
    venv = "writable"
except OSError as error:
    venv = error.strerror
print("TORCH " + json.dumps({"uid": os.getuid(), "sum": float((torch.ones(3) * 2).sum()), "venv": venv}))
"""


def test_a_trainer_pod_runs_the_hosts_torch_from_read_only_mounts(real_node_cluster):
    cluster, node = real_node_cluster
    namespace = f"realnode-torch-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", namespace)
    mounts = trainer_host_mounts(Path(sys.prefix))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "torch", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "pytorch",
                    "image": node.images.trainer,
                    "imagePullPolicy": "Never",
                    "command": [str(Path(sys.prefix) / "bin" / "python"), "-c", TORCH_SCRIPT],
                    "volumeMounts": [
                        {"name": f"host-{i}", "mountPath": str(path), "readOnly": True}
                        for i, path in enumerate(mounts)
                    ],
                }
            ],
            "volumes": [
                {"name": f"host-{i}", "hostPath": {"path": str(path), "type": "Directory"}}
                for i, path in enumerate(mounts)
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))

    def finished() -> str | None:
        phase = json.loads(
            cluster.kubectl("get", "pod", "torch", "-n", namespace, "-o", "json").stdout
        )["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_until(finished, POD_TIMEOUT_S, "the torch pod to finish")
    log = cluster.kubectl("logs", "-n", namespace, "torch").stdout
    assert phase == "Succeeded", log
    report = json.loads(log.split("TORCH ", 1)[1].splitlines()[0])
    assert report == {"uid": TRAINER_UID, "sum": 6.0, "venv": "Read-only file system"}
