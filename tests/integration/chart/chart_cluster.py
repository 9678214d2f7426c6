"""Names and helpers shared by the chart's tests against the local control plane: helm and
kubectl calls, opted-in pods, and access reviews for the chart's service account."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from stepscope_dev.agent_calls import signed_call
from stepscope_operator.agents.contract import AGENT_CONTAINER_NAME
from stepscope_operator.agents.signing import AgentKeyring
from support import wait_until

from stepscope.api.agent import STATUS_PATH
from stepscope.api.crds import KINDS

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART_DIR = REPO_ROOT / "charts" / "stepscope"
RELEASE = "stepscope"
NAMESPACE = "stepscope-it"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
S3_SECRET = "stepscope-s3"
CRDS = tuple(kind.name for kind in KINDS)
# The operator's console script, what the operator image's ENTRYPOINT runs.
OPERATOR_COMMAND = [str(Path(sys.executable).with_name("stepscope-operator"))]
# Pods in these tests are bound to a node nobody runs, so no pod runner ever starts them.
NOWHERE = "stepscope-it-unscheduled"


def helm(cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(cluster.bin_dir / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args[:2])} failed:\n{result.stdout}{result.stderr}")
    return result


def get_json(cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def ensure_namespace(cluster, name: str, labels: dict[str, str] | None = None) -> None:
    cluster.kubectl("create", "namespace", name, check=False)
    if labels:
        cluster.kubectl(
            "label", "--overwrite", "namespace", name, *[f"{k}={v}" for k, v in labels.items()]
        )
    # The ServiceAccount admission plugin refuses pods until the namespace's default account
    # exists; the controller manager creates it shortly after the namespace.
    wait_until(
        lambda: cluster.has_default_service_account(name),
        30,
        f"the default ServiceAccount in {name}",
        interval=0.3,
    )


def adopt_existing_crds(cluster) -> None:
    """CRDs another test applied with kubectl are handed to this release, the way Helm documents
    adopting existing objects; otherwise `helm install` refuses to take them over."""
    for crd in CRDS:
        if cluster.kubectl("get", "crd", crd, check=False).returncode == 0:
            cluster.kubectl("label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm")
            cluster.kubectl(
                "annotate",
                "--overwrite",
                "crd",
                crd,
                f"meta.helm.sh/release-name={RELEASE}",
                f"meta.helm.sh/release-namespace={NAMESPACE}",
            )


def access_review(verb: str, resource: str, namespace: str | None) -> dict:
    """A SubjectAccessReview for the chart's account: what `kubectl auth can-i --as` asks, and
    also answerable for resources whose CRDs are not installed (PyTorchJob, TrainJob)."""
    plural, _, subresource = resource.partition("/")
    plural, _, group = plural.partition(".")
    attributes = {"verb": verb, "group": group, "resource": plural, "subresource": subresource}
    if namespace:
        attributes["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": ACCOUNT,
            "resourceAttributes": attributes,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{NAMESPACE}",
                "system:authenticated",
            ],
        },
    }


def json_documents(text: str) -> list[dict]:
    """kubectl prints one JSON document per object it created, one after the other."""
    decoder, documents, position = json.JSONDecoder(), [], 0
    text = text.strip()
    while position < len(text):
        document, position = decoder.raw_decode(text, position)
        documents.append(document)
        while position < len(text) and text[position].isspace():
            position += 1
    return documents


def allowed(cluster, questions: list[tuple[str, str, str | None]]) -> dict[str, bool]:
    """Ask all (verb, resource, namespace) questions in one request; answers by 'verb resource'."""
    reviews = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [access_review(*question) for question in questions],
    }
    output = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(reviews)).stdout
    answers = json_documents(output)
    return {
        f"{verb} {resource}": bool(answer["status"].get("allowed"))
        for (verb, resource, _), answer in zip(questions, answers, strict=True)
    }


def trainer_pod(labels: dict[str, str] | None = None, restricted: bool = False) -> dict:
    container = {
        "name": "pytorch",
        "image": "trainer:1",
        "command": ["torchrun", "--nproc-per-node=2", "train.py"],
        "env": [{"name": "PYTHONPATH", "value": "/app"}],
    }
    spec = {
        "containers": [container],
        "restartPolicy": "Never",
        "nodeName": NOWHERE,
        "automountServiceAccountToken": False,
    }
    if restricted:
        spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "trainer-", "labels": labels or {}},
        "spec": spec,
    }


def create_pod(cluster, namespace: str, pod: dict, *extra: str) -> dict:
    result = cluster.kubectl(
        "-n", namespace, "create", "-f", "-", "-o", "json", *extra, input=json.dumps(pod)
    )
    return json.loads(result.stdout)


def is_mutated(pod: dict) -> bool:
    names = [c["name"] for c in pod["spec"].get("initContainers", [])]
    return AGENT_CONTAINER_NAME in names


SIGNING_KEYS_SECRET = f"{RELEASE}-agent-signing-keys"


def operator_keyring(cluster, directory: Path) -> AgentKeyring:
    """The keys of the chart's signing key Secret (read as the admin; the tests sign with them
    the way the chart's operator does)."""
    secret = get_json(cluster, "-n", NAMESPACE, "secret", SIGNING_KEYS_SECRET)
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in secret["data"].items():
        (directory / name).write_bytes(base64.b64decode(value))
    return AgentKeyring.load(directory)


TRAINING_LOOP = """
import time, torch
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    loss = model(torch.randn(32, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.02)
"""


def agent_status(pod: dict, keyring: AgentKeyring) -> dict | None:
    try:
        code, body = signed_call(
            f"{pod['status']['podIP']}:9464",
            "GET",
            STATUS_PATH,
            keyring=keyring,
            namespace=pod["metadata"]["namespace"],
            pod=pod["metadata"]["name"],
            pod_uid=pod["metadata"]["uid"],
            timeout=3,
        )
    except OSError:
        return None
    return body if code == 200 else None
