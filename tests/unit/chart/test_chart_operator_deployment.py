"""The operator Deployment: restricted Pod Security, kopf's liveness endpoint as probes,
settings the operator understands, and S3 credentials only by reference."""

import base64

import pytest
from chart_rendering import by_kind, helm_template_text, one, render
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from stepscope_operator.admission.webhook import ENV as WEBHOOK_ENV
from stepscope_operator.admission.webhook import load_webhook_settings
from stepscope_operator.settings import ENV as OPERATOR_ENV

# kopf's own variable: the operator's identity, read before any of ours.
KOPF_POD_ID_ENV = "POD_ID"


def operator_container(objects):
    deployment = one(objects, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, container


def test_pod_meets_the_restricted_pod_security_standard(tmp_path):
    deployment, container = operator_container(render(None, tmp_path))
    pod_context = deployment["spec"]["template"]["spec"]["securityContext"]
    assert pod_context["runAsNonRoot"] is True
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["readOnlyRootFilesystem"] is True
    assert context["runAsNonRoot"] is True


def test_probes_use_the_kopf_liveness_endpoint(tmp_path):
    _, container = operator_container(render({"operator": {"healthPort": 8181}}, tmp_path))
    assert "--liveness=http://0.0.0.0:8181/healthz" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == 8181
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_every_setting_the_chart_passes_is_one_the_operator_reads(tmp_path):
    _, container = operator_container(
        render(
            {
                "operator": {"watchNamespace": "team-a"},
                "s3": {
                    "endpoint": "http://s3:9000",
                    "agentEndpoint": "http://s3.x:9000",
                    "credentialsSecret": {"name": "s3-keys"},
                },
            },
            tmp_path,
        )
    )
    known = set(OPERATOR_ENV.values()) | set(WEBHOOK_ENV.values()) | {KOPF_POD_ID_ENV}
    passed = {e["name"] for e in container["env"]}
    assert passed - known == set(), f"the operator reads no such settings: {passed - known}"


def test_kopf_is_named_after_its_pod_not_the_passwd_entry(tmp_path):
    # Without POD_ID kopf calls getpass.getuser(), which fails for the image's numeric user
    # (no passwd entry) and stops the operator at start.
    deployment, container = operator_container(render(None, tmp_path))
    user = deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    env = {e["name"]: e for e in container["env"]}
    assert env[KOPF_POD_ID_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert user == 65532


def test_no_credentials_by_default_and_only_secret_references_when_asked(tmp_path):
    objects = render(None, tmp_path)
    _, container = operator_container(objects)
    names = {e["name"] for e in container["env"]}
    assert not names & {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}

    _, container = operator_container(
        render({"s3": {"credentialsSecret": {"name": "keys"}}}, tmp_path)
    )
    env = {e["name"]: e for e in container["env"]}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "keys", "key": name}


def test_an_ed25519_signing_key_secret_is_generated_and_mounted(tmp_path):
    objects = render(None, tmp_path)
    deployment, container = operator_container(objects)
    [keys] = [s for s in by_kind(objects, "Secret") if s["metadata"]["name"].endswith("-keys")]
    [pem] = keys["data"].values()
    key = serialization.load_pem_private_key(base64.b64decode(pem), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["agent-signing-keys"]["secret"]["secretName"] == keys["metadata"]["name"]
    # No items list: a key added for a rotation appears in the directory too.
    assert "items" not in volumes["agent-signing-keys"]["secret"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["agent-signing-keys"]
    assert env["STEPSCOPE_AGENT_SIGNING_KEYS_DIR"] == mount
    assert not [name for name in env if "TOKEN" in name]


def test_an_existing_signing_key_secret_replaces_the_generated_one(tmp_path):
    objects = render({"agent": {"signingKeys": {"existingSecret": "my-keys"}}}, tmp_path)
    assert not [s for s in by_kind(objects, "Secret") if s["metadata"]["name"].endswith("-keys")]
    deployment, _ = operator_container(objects)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["agent-signing-keys"]["secret"]["secretName"] == "my-keys"


def test_a_client_ca_makes_the_webhook_require_client_certificates(tmp_path):
    _, container = operator_container(render(None, tmp_path))
    assert "STEPSCOPE_WEBHOOK_CLIENT_CA_FILE" not in {e["name"] for e in container["env"]}
    objects = render({"webhook": {"clientCA": {"configMap": "apiserver-ca"}}}, tmp_path)
    deployment, container = operator_container(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["webhook-client-ca"]
    assert env["STEPSCOPE_WEBHOOK_CLIENT_CA_FILE"] == f"{mount}/ca.crt"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-client-ca"]["configMap"]["name"] == "apiserver-ca"


def test_the_webhook_port_admits_only_the_configured_peers(tmp_path):
    peers = [{"ipBlock": {"cidr": "10.0.0.0/28"}}]
    objects = render({"networkPolicy": {"webhookFrom": peers}}, tmp_path)
    [policy] = [p for p in by_kind(objects, "NetworkPolicy")]
    webhook_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 9443)
    assert webhook_rule["from"] == peers
    # By default the webhook port admits any source (API servers often sit outside the pod
    # network); only the metrics port is narrowed (test_chart_metrics.py).
    [open_policy] = by_kind(render(None, tmp_path), "NetworkPolicy")
    open_webhook = next(r for r in open_policy["spec"]["ingress"] if r["ports"][0]["port"] == 9443)
    assert "from" not in open_webhook


def test_images_are_pinned_by_digest_when_given(tmp_path):
    digest = "sha256:" + "a" * 64
    _, container = operator_container(
        render(
            {"operator": {"image": {"digest": digest}}, "agent": {"image": {"tag": "9.9.9"}}},
            tmp_path,
        )
    )
    assert container["image"] == f"ghcr.io/stepscope/stepscope-operator@{digest}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["STEPSCOPE_AGENT_IMAGE"] == "ghcr.io/stepscope/stepscope-agent:9.9.9"


@pytest.mark.parametrize("replicas", [0, 1])
def test_zero_or_one_replica_and_recreate_on_upgrade(tmp_path, replicas):
    deployment, _ = operator_container(render({"operator": {"replicas": replicas}}, tmp_path))
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_two_replicas_are_refused_with_the_reason(tmp_path):
    result = helm_template_text({"operator": {"replicas": 2}}, tmp_path, check=False)
    assert result.returncode != 0 and "operator.replicas must be 0 or 1" in result.stderr


def test_crds_are_kept_on_uninstall_and_optional(tmp_path):
    crds = by_kind(render(None, tmp_path), "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == [
        "profileschedules.stepscope.dev",
        "profilesessions.stepscope.dev",
        "profiletriggers.stepscope.dev",
    ]
    for crd in crds:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert by_kind(render({"crds": {"install": False}}, tmp_path), "CustomResourceDefinition") == []


def test_agent_network_policies_only_in_listed_namespaces(tmp_path):
    objects = render({"networkPolicy": {"agentNamespaces": ["team-a"]}}, tmp_path)
    policies = {p["metadata"]["namespace"]: p for p in by_kind(objects, "NetworkPolicy")}
    agent = policies["team-a"]
    assert agent["spec"]["podSelector"] == {"matchLabels": {"stepscope.dev/agent": "injected"}}
    assert agent["spec"]["ingress"][0]["ports"] == [{"port": 9464, "protocol": "TCP"}]
    assert len(policies) == 2


def test_sidecar_resources_reach_the_webhook_settings(tmp_path):
    resources = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    _, container = operator_container(render({"agent": {"resources": resources}}, tmp_path))
    env = {e["name"]: e.get("value") for e in container["env"] if "value" in e}
    assert load_webhook_settings(env).agent_resources == resources
