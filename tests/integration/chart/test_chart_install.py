"""The Helm chart against the real API server of the local control plane.

In order: the rendered chart passes server-side dry-run; `helm install` (operator replicas 0,
webhook in URL mode); the chart's service account can do exactly what the operator declares;
the operator (`stepscope-operator`, run with the Deployment's environment, Secret files and a
token of that service account) serves the webhook and the API server calls it: opted-in pods
come back mutated, others unchanged, injected pods pass "restricted" Pod Security admission;
with the operator stopped pods are still created; `helm upgrade` keeps the signing keys, certificate
and settings; `helm uninstall` leaves only the CRDs.
"""

from __future__ import annotations

import base64
import json
import ssl
import textwrap
import time
import urllib.error
import urllib.request

import pytest
import yaml
from chart_cluster import (
    ACCOUNT,
    CHART_DIR,
    CRDS,
    NAMESPACE,
    OPERATOR_COMMAND,
    RELEASE,
    S3_SECRET,
    SIGNING_KEYS_SECRET,
    TRAINING_LOOP,
    adopt_existing_crds,
    agent_status,
    allowed,
    create_pod,
    ensure_namespace,
    get_json,
    helm,
    is_mutated,
    operator_keyring,
    trainer_pod,
)
from chart_operator_process import start_chart_operator
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families
from stepscope_dev.podrunner import start_podrunner
from stepscope_operator.admission.injection import INJECT_LABEL, INJECTED_LABEL
from stepscope_operator.agents.contract import AGENT_CONTAINER_NAME, HOOK_DIR
from stepscope_operator.permissions import REQUIRED_PERMISSIONS
from support import free_port, wait_for_port, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def release(local_cluster, tmp_path_factory):
    cluster = local_cluster
    workdir = tmp_path_factory.mktemp("chart")
    ensure_namespace(cluster, NAMESPACE)
    cluster.kubectl(
        "-n",
        NAMESPACE,
        "create",
        "secret",
        "generic",
        S3_SECRET,
        f"--from-literal=AWS_ACCESS_KEY_ID={cluster.s3_access_key}",
        f"--from-literal=AWS_SECRET_ACCESS_KEY={cluster.s3_secret_key}",
    )
    webhook_port = free_port()
    artifacts_port = free_port()
    metrics_port = free_port()
    values = {
        "operator": {"replicas": 0},
        "artifacts": {"port": artifacts_port, "listenAddress": "127.0.0.1"},
        "metrics": {"port": metrics_port, "listenAddress": "127.0.0.1"},
        "webhook": {
            "url": f"https://127.0.0.1:{webhook_port}",
            "listenAddress": "127.0.0.1",
            "port": webhook_port,
        },
        "s3": {
            "endpoint": cluster.s3_endpoint,
            "bucket": cluster.s3_bucket,
            "region": cluster.s3_region,
            "credentialsSecret": {"name": S3_SECRET},
        },
        "agent": {"image": {"repository": "stepscope-agent", "tag": "it"}},
    }
    values_file = workdir / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    adopt_existing_crds(cluster)
    installed = helm(
        cluster,
        "install",
        RELEASE,
        str(CHART_DIR),
        "-n",
        NAMESPACE,
        "-f",
        str(values_file),
        "--wait",
        "--timeout",
        "2m",
    )
    state = {
        "cluster": cluster,
        "workdir": workdir,
        "webhook_port": webhook_port,
        "artifacts_port": artifacts_port,
        "metrics_port": metrics_port,
        "values_file": values_file,
        "install_output": installed.stdout,
        "operator": None,
    }
    try:
        yield state
    finally:
        if state["operator"] is not None:
            state["operator"].stop()
        helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
        for namespace in ("team-pod", "team-ns", "team-restricted", "stepscope-dryrun", NAMESPACE):
            # Pods bound to a node without a kubelet never confirm a graceful deletion.
            cluster.kubectl(
                "-n",
                namespace,
                "delete",
                "pods",
                "--all",
                "--force",
                "--grace-period=0",
                check=False,
            )
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_rendered_chart_passes_server_side_dry_run(local_cluster, tmp_path):
    cluster = local_cluster
    ensure_namespace(cluster, "stepscope-dryrun")
    for extra in (
        [],
        [
            "--set",
            "operator.watchNamespace=stepscope-dryrun",
            "--set",
            "networkPolicy.agentNamespaces={stepscope-dryrun}",
        ],
    ):
        rendered = helm(
            cluster, "template", "dryrun", str(CHART_DIR), "-n", "stepscope-dryrun", *extra
        ).stdout
        applied = cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=rendered, check=False
        )
        assert applied.returncode == 0, applied.stderr
        kinds = {line.split("/")[0] for line in applied.stdout.splitlines()}
        assert {
            "deployment.apps",
            "mutatingwebhookconfiguration.admissionregistration.k8s.io",
            "customresourcedefinition.apiextensions.k8s.io",
        } <= kinds, applied.stdout


def test_install_tells_the_user_the_next_command_and_it_is_valid(release):
    notes = release["install_output"]
    assert "STATUS: deployed" in notes
    lines = notes.splitlines()
    start = next(
        i for i, line in enumerate(lines) if "kubectl apply -n <job-namespace> -f -" in line
    )
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "EOF")
    manifest = textwrap.dedent("\n".join(lines[start + 1 : end])).replace("<job-name>", "demo")
    applied = release["cluster"].kubectl(
        "-n", NAMESPACE, "apply", "--dry-run=server", "-f", "-", input=manifest, check=False
    )
    assert applied.returncode == 0, applied.stderr


def test_service_account_may_do_what_the_operator_needs_and_no_more(release):
    cluster = release["cluster"]
    needed = []
    for permission in REQUIRED_PERMISSIONS:
        base, _, sub = permission.resource.partition("/")
        qualified = f"{base}.{permission.api_group}" if permission.api_group else base
        resource = f"{qualified}/{sub}" if sub else qualified
        namespace = None if permission.scope == "cluster" else "team-pod"
        needed += [(verb, resource, namespace) for verb in permission.verbs]
    refused = [q for q, ok in allowed(cluster, needed).items() if not ok]
    assert not refused, f"the chart's service account is refused: {refused}"
    forbidden = [
        ("get", "secrets", "team-pod"),
        ("get", "secrets", NAMESPACE),
        ("create", "pods", "team-pod"),
        ("delete", "pods", "team-pod"),
        ("update", "profilesessions.stepscope.dev", "team-pod"),
        ("create", "customresourcedefinitions.apiextensions.k8s.io", None),
        ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None),
        ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None),
    ]
    granted = [q for q, ok in allowed(cluster, forbidden).items() if ok]
    assert not granted, f"{ACCOUNT} may do more than the operator needs: {granted}"
    # The same authorizer through kubectl's own impersonating check.
    for verb, resource, expected in (("list", "pods", "yes"), ("get", "secrets", "no")):
        answer = cluster.kubectl(
            "auth", "can-i", verb, resource, f"--as={ACCOUNT}", "-n", "team-pod", check=False
        ).stdout.strip()
        assert answer == expected, f"kubectl auth can-i {verb} {resource}: {answer}"


@pytest.fixture(scope="module")
def webhook_operator(release):
    cluster = release["cluster"]
    operator = start_chart_operator(
        cluster, NAMESPACE, RELEASE, OPERATOR_COMMAND, release["workdir"], health_port=free_port()
    )
    release["operator"] = operator
    operator.wait_healthy()
    wait_for_port(release["webhook_port"])
    ensure_namespace(cluster, "team-pod")
    ensure_namespace(cluster, "team-ns", {INJECT_LABEL: "true"})
    return operator


def test_opted_in_pod_comes_back_with_the_agent_and_its_command_untouched(
    webhook_operator, release
):
    cluster = release["cluster"]
    pod = create_pod(cluster, "team-pod", trainer_pod({INJECT_LABEL: "true"}))
    assert is_mutated(pod), json.dumps(pod["spec"], indent=1)
    assert pod["metadata"]["labels"][INJECTED_LABEL] == "injected"
    [trainer] = pod["spec"]["containers"]
    assert trainer["command"] == ["torchrun", "--nproc-per-node=2", "train.py"]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["PYTHONPATH"] == f"{HOOK_DIR}:/app"
    sidecar = next(c for c in pod["spec"]["initContainers"] if c["name"] == AGENT_CONTAINER_NAME)
    assert sidecar["image"] == "stepscope-agent:it"
    assert sidecar["restartPolicy"] == "Always"
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    keyring = operator_keyring(cluster, release["workdir"] / "keys-injected")
    assert env["STEPSCOPE_AGENT_TRUSTED_KEYS"] == keyring.trusted_keys_text()
    assert env["STEPSCOPE_STORAGE_ENDPOINT"] == cluster.s3_endpoint
    assert not [name for name in env if "TOKEN" in name]


def test_pods_that_did_not_opt_in_come_back_unchanged(webhook_operator, release):
    cluster = release["cluster"]
    for namespace, labels in (("team-pod", {}), ("team-ns", {INJECT_LABEL: "false"})):
        sent = trainer_pod(labels)
        pod = create_pod(cluster, namespace, sent)
        assert not is_mutated(pod)
        assert "initContainers" not in pod["spec"]
        assert INJECTED_LABEL not in pod["metadata"].get("labels", {})
        assert pod["spec"]["containers"][0]["env"] == sent["spec"]["containers"][0]["env"]


def test_namespace_label_opts_in_every_pod_also_on_server_dry_run(webhook_operator, release):
    cluster = release["cluster"]
    assert is_mutated(create_pod(cluster, "team-ns", trainer_pod()))
    assert is_mutated(create_pod(cluster, "team-ns", trainer_pod(), "--dry-run=server"))


def test_a_pod_that_cannot_be_injected_is_created_with_a_warning(webhook_operator, release):
    pod = trainer_pod({INJECT_LABEL: "true"})
    pod["metadata"]["annotations"] = {"stepscope.dev/container": "no-such-container"}
    result = release["cluster"].kubectl(
        "-n", "team-pod", "create", "-f", "-", "-o", "json", input=json.dumps(pod)
    )
    assert not is_mutated(json.loads(result.stdout))
    assert "Warning: stepscope agent not injected" in result.stderr
    assert "no-such-container" in result.stderr


def test_injected_pod_passes_restricted_pod_security_admission(webhook_operator, release):
    cluster = release["cluster"]
    ensure_namespace(
        cluster, "team-restricted", {"pod-security.kubernetes.io/enforce": "restricted"}
    )
    refused = cluster.kubectl(
        "-n",
        "team-restricted",
        "create",
        "-f",
        "-",
        input=json.dumps(trainer_pod({INJECT_LABEL: "true"})),
        check=False,
    )
    assert refused.returncode != 0 and "restricted" in refused.stderr, "PSA is not enforcing"
    pod = create_pod(
        cluster, "team-restricted", trainer_pod({INJECT_LABEL: "true"}, restricted=True)
    )
    assert is_mutated(pod)


def test_injected_pod_runs_its_agent_and_is_profiled_by_the_charts_operator(
    webhook_operator, release
):
    """The whole chain on the local pod runner: the webhook injects, the hook counts the
    trainer's optimizer steps, the sidecar answers calls signed with the chart's key, and the
    operator (the chart's account) profiles the pod to a final phase."""
    cluster = release["cluster"]
    start_podrunner(cluster, die_with_parent=True)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "injected-trainer",
            "labels": {INJECT_LABEL: "true", "app": "injected-trainer"},
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "pytorch",
                    "image": "trainer:1",
                    "command": ["python", "-c", TRAINING_LOOP],
                }
            ],
        },
    }
    assert is_mutated(create_pod(cluster, "team-pod", pod))
    keyring = operator_keyring(cluster, release["workdir"] / "keys-profiled")

    def stepping() -> dict | None:
        current = get_json(cluster, "-n", "team-pod", "pod", "injected-trainer")
        if current["status"].get("phase") != "Running" or not current["status"].get("podIP"):
            return None
        status = agent_status(current, keyring)
        return status if status and (status.get("currentStep") or 0) > 5 else None

    status = wait_until(stepping, 120, "the agent to report the trainer's steps")
    assert status["pod"] == "injected-trainer" and status["namespace"] == "team-pod"

    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": "injected", "namespace": "team-pod"},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "injected-trainer"}}},
            "window": {"steps": 3, "warmupSteps": 1, "leadSeconds": 2, "timeoutSeconds": 120},
            "granularity": "ops",
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(session))

    def final_phase() -> str | None:
        phase = (
            get_json(cluster, "-n", "team-pod", "profilesession", "injected")
            .get("status", {})
            .get("phase")
        )
        return phase if phase in ("Succeeded", "PartiallySucceeded", "Failed") else None

    phase = wait_until(final_phase, 150, "the session to finish")
    body = get_json(cluster, "-n", "team-pod", "profilesession", "injected")
    assert phase == "Succeeded", json.dumps(body.get("status"), indent=1)
    assert body["status"]["ranks"]["captured"] == 1
    cluster.kubectl("-n", "team-pod", "delete", "profilesession", "injected", "--timeout=60s")
    cluster.kubectl("-n", "team-pod", "delete", "pod", "injected-trainer", "--timeout=60s")


def test_operator_ran_on_the_charts_permissions_alone(webhook_operator, release):
    # A session with no pods to profile makes the operator list pods, patch status through
    # every step to Failed and post Events: all with the chart's service account only.
    cluster = release["cluster"]
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": "no-pods", "namespace": "team-pod"},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "nothing-runs-this"}}},
            "window": {"steps": 1, "leadSeconds": 0, "timeoutSeconds": 3},
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(session))

    def failed() -> dict | None:
        body = get_json(cluster, "-n", "team-pod", "profilesession", "no-pods")
        return body if body.get("status", {}).get("phase") == "Failed" else None

    body = wait_until(failed, 60, "the operator to give up on a session with no pods")
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "WaitingForPods", ready
    assert "no running or pending pods" in ready["message"]
    events = get_json(
        cluster,
        "-n",
        "team-pod",
        "events",
        "--field-selector=involvedObject.kind=ProfileSession,involvedObject.name=no-pods",
    )["items"]
    assert ("Warning", "Failed") in {(e["type"], e["reason"]) for e in events}, events
    cluster.kubectl("-n", "team-pod", "delete", "profilesession", "no-pods", "--timeout=60s")
    log = webhook_operator.log()
    assert "Forbidden" not in log and " 403" not in log, log


def test_artifact_endpoint_serves_https_on_the_charts_certificate(webhook_operator, release):
    """The chart wires the endpoint: its port, the webhook's serving pair, and refusals for a
    caller without a token (the full RBAC path is tests/integration/operator/
    test_artifact_access.py)."""
    cluster = release["cluster"]
    wait_for_port(release["artifacts_port"])
    secret = get_json(cluster, "-n", NAMESPACE, "secret", f"{RELEASE}-webhook-tls")
    context = ssl.create_default_context(cadata=base64.b64decode(secret["data"]["ca.crt"]).decode())
    url = (
        f"https://127.0.0.1:{release['artifacts_port']}/v1/namespaces/a/profilesessions/s/artifacts"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10, context=context)
    assert refused.value.code == 401
    assert b"no bearer token" in refused.value.read()


def test_the_charts_metrics_service_serves_the_operators_metrics(webhook_operator, release):
    """The chart's metrics Service targets the operator's metrics port, and that port serves
    Prometheus text the official parser reads, holding the operator's own families."""
    cluster = release["cluster"]
    service = get_json(cluster, "-n", NAMESPACE, "service", f"{RELEASE}-metrics")
    [port] = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (release["metrics_port"], "metrics")
    wait_for_port(release["metrics_port"])
    url = f"http://127.0.0.1:{release['metrics_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        families = {f.name for f in text_string_to_metric_families(response.read().decode())}
    assert {"stepscope_sessions_finished", "stepscope_regressions"} <= families


def test_pods_are_created_unchanged_while_the_operator_is_down(webhook_operator, release):
    cluster = release["cluster"]
    webhook_operator.stop()
    started = time.monotonic()
    pod = create_pod(cluster, "team-pod", trainer_pod({INJECT_LABEL: "true"}))
    elapsed = time.monotonic() - started
    assert not is_mutated(pod)
    assert elapsed < 10, f"pod creation waited {elapsed:.1f}s on the stopped webhook"


def test_upgrade_keeps_signing_keys_certificate_and_settings(release):
    cluster = release["cluster"]
    keys_before = get_json(cluster, "-n", NAMESPACE, "secret", SIGNING_KEYS_SECRET)["data"]
    tls_before = get_json(cluster, "-n", NAMESPACE, "secret", f"{RELEASE}-webhook-tls")["data"]
    helm(
        cluster,
        "upgrade",
        RELEASE,
        str(CHART_DIR),
        "-n",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "operator.defaultRetention=72h",
        "--wait",
        "--timeout",
        "2m",
    )
    keys_after = get_json(cluster, "-n", NAMESPACE, "secret", SIGNING_KEYS_SECRET)["data"]
    tls_after = get_json(cluster, "-n", NAMESPACE, "secret", f"{RELEASE}-webhook-tls")["data"]
    assert keys_after == keys_before
    assert tls_after == tls_before
    config = get_json(cluster, "mutatingwebhookconfiguration", f"{NAMESPACE}-{RELEASE}")
    assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {tls_before["ca.crt"]}
    deployment = get_json(cluster, "-n", NAMESPACE, "deployment", RELEASE)
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STEPSCOPE_DEFAULT_RETENTION"]["value"] == "72h"
    assert env["STEPSCOPE_S3_ENDPOINT"]["value"] == cluster.s3_endpoint
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == S3_SECRET

    # The same with the values file instead of --reuse-values (the usual CI/GitOps upgrade).
    helm(
        cluster,
        "upgrade",
        RELEASE,
        str(CHART_DIR),
        "-n",
        NAMESPACE,
        "-f",
        str(release["values_file"]),
        "--wait",
        "--timeout",
        "2m",
    )
    assert get_json(cluster, "-n", NAMESPACE, "secret", SIGNING_KEYS_SECRET)["data"] == keys_before


def test_upgrade_regenerates_the_certificate_when_the_webhook_address_changes(release):
    cluster = release["cluster"]
    before = get_json(cluster, "-n", NAMESPACE, "secret", f"{RELEASE}-webhook-tls")["data"]
    helm(
        cluster,
        "upgrade",
        RELEASE,
        str(CHART_DIR),
        "-n",
        NAMESPACE,
        "--reuse-values",
        "--set",
        f"webhook.url=https://localhost:{release['webhook_port']}",
        "--wait",
    )
    after = get_json(cluster, "-n", NAMESPACE, "secret", f"{RELEASE}-webhook-tls")["data"]
    assert after["tls.crt"] != before["tls.crt"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(after["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    config = get_json(cluster, "mutatingwebhookconfiguration", f"{NAMESPACE}-{RELEASE}")
    assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {after["ca.crt"]}


def test_uninstall_leaves_only_the_kept_crds(release):
    cluster = release["cluster"]
    helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    namespaced = cluster.kubectl(
        "-n",
        NAMESPACE,
        "get",
        "deployments,services,secrets,serviceaccounts,roles,rolebindings,networkpolicies",
        "-l",
        selector,
        "-o",
        "name",
    ).stdout.split()
    assert namespaced == []
    cluster_scoped = cluster.kubectl(
        "get",
        "clusterroles,clusterrolebindings,mutatingwebhookconfigurations",
        "-l",
        selector,
        "-o",
        "name",
    ).stdout.split()
    assert cluster_scoped == []
    remaining_crds = cluster.kubectl("get", "crd", "-l", selector, "-o", "name").stdout.split()
    assert sorted(remaining_crds) == sorted(
        f"customresourcedefinition.apiextensions.k8s.io/{c}" for c in CRDS
    )
    # The S3 Secret is the user's, created before the install: the chart never owned it.
    assert cluster.kubectl("-n", NAMESPACE, "get", "secret", S3_SECRET, check=False).returncode == 0
