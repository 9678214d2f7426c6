"""build_injection_patch: who gets the agent, what they get, and that nothing else changes."""

import copy

import jsonpatch
import pytest
from stepscope_operator.admission.injection import (
    INJECT_LABEL,
    INJECTED_LABEL,
    InjectionError,
    InjectionSettings,
    build_injection_patch,
)
from stepscope_operator.agents.contract import (
    AGENT_CONTAINER_NAME,
    ENV_JOB_KIND,
    ENV_JOB_NAME,
    ENV_STORAGE_ENDPOINT,
    ENV_TRUSTED_KEYS,
    HOOK_DIR,
    HOOK_INSTALL_CONTAINER_NAME,
    SHARED_VOLUME_NAME,
)

SETTINGS = InjectionSettings(
    agent_image="registry.example/stepscope-agent:0.1.0",
    trusted_keys="a2V5LW9uZQ==,a2V5LXR3bw==",
    storage_endpoint="https://s3.example.com",
)


def pytorchjob_pod(labels=None, **spec_extra):
    """A pod as the Kubeflow training operator creates it for a PyTorchJob worker."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "llama-ft-worker-0",
            "namespace": "team-a",
            "labels": {"training.kubeflow.org/job-name": "llama-ft", **(labels or {})},
        },
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "trainer:1",
                    "command": ["torchrun", "--nproc-per-node=2", "train.py"],
                    "args": ["--epochs", "3"],
                    "env": [{"name": "RANK", "value": "0"}],
                }
            ],
            "restartPolicy": "OnFailure",
            **spec_extra,
        },
    }
    return pod


def inject(pod, namespace_labels=None, settings=SETTINGS):
    ops = build_injection_patch(pod, namespace_labels or {}, settings)
    return ops, jsonpatch.apply_patch(pod, ops)


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def test_pod_label_opt_in_adds_sidecar_hook_and_env_and_keeps_the_command():
    pod = pytorchjob_pod({INJECT_LABEL: "true"})
    original = copy.deepcopy(pod)
    ops, mutated = inject(pod)

    assert ops and pod == original, "the input pod must not be mutated in place"
    init = {c["name"]: c for c in mutated["spec"]["initContainers"]}
    assert list(init) == [HOOK_INSTALL_CONTAINER_NAME, AGENT_CONTAINER_NAME]
    assert init[AGENT_CONTAINER_NAME]["restartPolicy"] == "Always"
    assert init[AGENT_CONTAINER_NAME]["image"] == SETTINGS.agent_image
    sidecar_env = env_of(init[AGENT_CONTAINER_NAME])
    assert sidecar_env[ENV_TRUSTED_KEYS]["value"] == SETTINGS.trusted_keys
    assert sidecar_env[ENV_STORAGE_ENDPOINT]["value"] == SETTINGS.storage_endpoint
    assert HOOK_DIR in init[HOOK_INSTALL_CONTAINER_NAME]["command"]
    assert mutated["spec"]["volumes"] == [{"name": SHARED_VOLUME_NAME, "emptyDir": {}}]
    assert mutated["metadata"]["labels"][INJECTED_LABEL] == "injected"

    trainer = mutated["spec"]["containers"][0]
    before = original["spec"]["containers"][0]
    for untouched in ("name", "image", "command", "args"):
        assert trainer[untouched] == before[untouched]
    assert env_of(trainer)["PYTHONPATH"]["value"] == HOOK_DIR
    assert env_of(trainer)["RANK"] == {"name": "RANK", "value": "0"}
    assert [m["name"] for m in trainer["volumeMounts"]] == [SHARED_VOLUME_NAME]
    # Nothing outside labels, volumes, init containers and the trainer's env/mounts changes.
    assert {op["path"].split("/")[2] for op in ops} <= {
        "labels",
        "volumes",
        "initContainers",
        "containers",
    }


def test_second_pass_is_a_no_op():
    _, mutated = inject(pytorchjob_pod({INJECT_LABEL: "true"}))
    assert build_injection_patch(mutated, {}, SETTINGS) == []


def test_a_sidecar_added_by_hand_is_left_alone():
    pod = pytorchjob_pod({INJECT_LABEL: "true"})
    pod["spec"]["containers"].append({"name": AGENT_CONTAINER_NAME, "image": "agent:mine"})
    assert build_injection_patch(pod, {}, SETTINGS) == []


@pytest.mark.parametrize(
    ("pod_labels", "namespace_labels"),
    [
        ({}, {}),
        ({INJECT_LABEL: "false"}, {INJECT_LABEL: "true"}),
        ({INJECT_LABEL: "yes"}, {}),
        ({}, {INJECT_LABEL: "false"}),
    ],
)
def test_pods_that_did_not_opt_in_are_never_changed(pod_labels, namespace_labels):
    assert build_injection_patch(pytorchjob_pod(pod_labels), namespace_labels, SETTINGS) == []


def test_namespace_label_opts_in_pods_without_their_own_label():
    ops, mutated = inject(pytorchjob_pod(), {INJECT_LABEL: "true"})
    assert ops and mutated["metadata"]["labels"][INJECTED_LABEL] == "injected"


def test_existing_literal_pythonpath_is_kept_after_the_hook():
    pod = pytorchjob_pod({INJECT_LABEL: "true"})
    pod["spec"]["containers"][0]["env"].append({"name": "PYTHONPATH", "value": "/app:/libs"})
    _, mutated = inject(pod)
    env = env_of(mutated["spec"]["containers"][0])
    assert env["PYTHONPATH"]["value"] == f"{HOOK_DIR}:/app:/libs"
    names = [e["name"] for e in mutated["spec"]["containers"][0]["env"]]
    assert names.count("PYTHONPATH") == 1


def test_pythonpath_from_a_configmap_is_referenced_not_lost():
    pod = pytorchjob_pod({INJECT_LABEL: "true"})
    source = {"configMapKeyRef": {"name": "paths", "key": "pythonpath"}}
    pod["spec"]["containers"][0]["env"].append({"name": "PYTHONPATH", "valueFrom": source})
    _, mutated = inject(pod)
    env = mutated["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    kept = names.index("STEPSCOPE_USER_PYTHONPATH")
    assert env[kept]["valueFrom"] == source
    # The kubelet only expands $(VAR) from variables defined earlier in the list.
    assert names.index("PYTHONPATH") > kept
    assert env[names.index("PYTHONPATH")]["value"] == f"{HOOK_DIR}:$(STEPSCOPE_USER_PYTHONPATH)"


def test_pod_without_labels_env_or_lists_gets_them_created():
    pod = {
        "metadata": {"namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "trainer:1"}]},
    }
    _, mutated = inject(pod, {INJECT_LABEL: "true"})
    assert mutated["metadata"]["labels"] == {INJECTED_LABEL: "injected"}
    assert env_of(mutated["spec"]["containers"][0])["PYTHONPATH"]["value"] == HOOK_DIR


def test_user_init_containers_and_volumes_are_kept_first():
    pod = pytorchjob_pod(
        {INJECT_LABEL: "true"},
        initContainers=[{"name": "fetch-data", "image": "busybox"}],
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    _, mutated = inject(pod)
    assert [c["name"] for c in mutated["spec"]["initContainers"]] == [
        "fetch-data",
        HOOK_INSTALL_CONTAINER_NAME,
        AGENT_CONTAINER_NAME,
    ]
    assert [v["name"] for v in mutated["spec"]["volumes"]] == ["data", SHARED_VOLUME_NAME]


def test_training_container_is_found_by_name_or_annotation():
    pod = pytorchjob_pod({INJECT_LABEL: "true"})
    pod["spec"]["containers"].insert(0, {"name": "log-shipper", "image": "fluent-bit"})
    _, mutated = inject(pod)
    assert "env" not in mutated["spec"]["containers"][0]
    assert "PYTHONPATH" in env_of(mutated["spec"]["containers"][1])

    pod["metadata"]["annotations"] = {"stepscope.dev/container": "log-shipper"}
    _, mutated = inject(pod)
    assert "PYTHONPATH" in env_of(mutated["spec"]["containers"][0])
    assert "PYTHONPATH" not in env_of(mutated["spec"]["containers"][1])


def test_annotation_naming_a_missing_container_is_a_clear_error():
    pod = pytorchjob_pod({INJECT_LABEL: "true"})
    pod["metadata"]["annotations"] = {"stepscope.dev/container": "trainer"}
    with pytest.raises(InjectionError, match=r"stepscope.dev/container='trainer'.*pytorch"):
        build_injection_patch(pod, {}, SETTINGS)


def test_a_volume_with_our_name_is_refused_rather_than_shared():
    pod = pytorchjob_pod({INJECT_LABEL: "true"}, volumes=[{"name": SHARED_VOLUME_NAME}])
    with pytest.raises(InjectionError, match=SHARED_VOLUME_NAME):
        build_injection_patch(pod, {}, SETTINGS)


def test_injected_containers_meet_the_restricted_pod_security_standard():
    _, mutated = inject(pytorchjob_pod({INJECT_LABEL: "true"}))
    for container in mutated["spec"]["initContainers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["runAsNonRoot"] is True
        assert context["seccompProfile"]["type"] == "RuntimeDefault"


def test_settings_need_trusted_keys_and_a_storage_endpoint():
    with pytest.raises(ValueError, match="trusted_keys"):
        InjectionSettings(agent_image="x", trusted_keys="", storage_endpoint="http://s3")
    with pytest.raises(ValueError, match="storage_endpoint"):
        InjectionSettings(agent_image="x", trusted_keys="k")


def test_sidecar_learns_its_pod_from_the_downward_api_and_listens_on_the_pod_ip():
    _, mutated = inject(pytorchjob_pod({INJECT_LABEL: "true"}))
    sidecar = mutated["spec"]["initContainers"][-1]
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in sidecar["env"]
        if "valueFrom" in e
    }
    assert fields == {
        "STEPSCOPE_AGENT_HOST": "status.podIP",
        "STEPSCOPE_POD_NAME": "metadata.name",
        "STEPSCOPE_POD_NAMESPACE": "metadata.namespace",
        # Calls are signed for the pod's UID: a pod that takes its address or name later
        # refuses them.
        "STEPSCOPE_POD_UID": "metadata.uid",
        "STEPSCOPE_NODE_NAME": "spec.nodeName",
    }
    assert sidecar["command"] == ["stepscope-agent"]
    assert sidecar["securityContext"]["runAsUser"] == 65532


@pytest.mark.parametrize(
    ("labels", "job"),
    [
        ({}, ("PyTorchJob", "llama-ft")),
        (
            {
                "training.kubeflow.org/job-name": "",
                "jobset.sigs.k8s.io/jobset-name": "trainjob-7",
            },
            ("JobSet", "trainjob-7"),
        ),
        ({"training.kubeflow.org/job-name": ""}, None),
    ],
)
def test_the_sidecar_is_told_its_pods_job_from_the_training_operators_labels(labels, job):
    _, mutated = inject(pytorchjob_pod({INJECT_LABEL: "true", **labels}))
    sidecar = {c["name"]: c for c in mutated["spec"]["initContainers"]}[AGENT_CONTAINER_NAME]
    env = env_of(sidecar)
    if job is None:
        assert ENV_JOB_KIND not in env and ENV_JOB_NAME not in env
    else:
        assert (env[ENV_JOB_KIND]["value"], env[ENV_JOB_NAME]["value"]) == job
