"""The generated CRDs on a real kube-apiserver: install, apply, reject, print."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from stepscope.api import ProfileScheduleSpec, ProfileSession, ProfileSessionSpec
from stepscope.api.crds import KINDS, build_crds

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "crds" / "examples"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _rule_messages(node) -> list[str]:
    if isinstance(node, dict):
        own = [rule["message"] for rule in node.get("x-kubernetes-validations", [])]
        return own + [m for child in node.values() for m in _rule_messages(child)]
    if isinstance(node, list):
        return [m for child in node for m in _rule_messages(child)]
    return []


CEL_MESSAGES = _rule_messages(build_crds())


def session_manifest(name: str, spec: dict) -> str:
    return json.dumps(
        {
            "apiVersion": "stepscope.dev/v1alpha1",
            "kind": "ProfileSession",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def test_both_crds_are_established(crds_installed) -> None:
    for kind in KINDS:
        crd = json.loads(crds_installed.kubectl("get", "crd", kind.name, "-o", "json").stdout)
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True", conditions
        assert conditions["NamesAccepted"] == "True", conditions
        assert crd["status"]["acceptedNames"]["shortNames"] == list(kind.short_names)


def test_examples_apply_server_side_with_defaults(crds_installed, namespace) -> None:
    for example in ("profilesession.yaml", "profileschedule.yaml", "hangcheck.yaml"):
        applied = crds_installed.kubectl(
            "apply", "--server-side", "-n", namespace, "-f", str(EXAMPLES / example)
        )
        assert "serverside-applied" in applied.stdout

    stored = json.loads(
        crds_installed.kubectl(
            "get", "profilesession", "ddp-demo-profile", "-n", namespace, "-o", "json"
        ).stdout
    )
    session = ProfileSession.model_validate(stored)
    hang_check = ProfileSession.model_validate(
        json.loads(
            crds_installed.kubectl(
                "get", "profilesession", "hung-check", "-n", namespace, "-o", "json"
            ).stdout
        )
    )
    assert hang_check.spec.mode == "hang-check" and hang_check.spec.target.pytorch_job == "hung"
    assert session.spec.target.pytorch_job == "ddp-demo"
    assert session.spec.window.steps == 5
    assert session.spec.target.ranks == "all"

    schedule = json.loads(
        crds_installed.kubectl(
            "get", "psched", "ddp-demo-baseline", "-n", namespace, "-o", "json"
        ).stdout
    )
    # Fields the example leaves out come back with the schema's defaults.
    assert schedule["spec"]["sessionTemplate"]["window"] == {
        "steps": 5,
        "warmupSteps": 1,
        "leadSeconds": 10,
        "timeoutSeconds": 900,
        "repeat": 1,
    }
    assert schedule["spec"]["sessionTemplate"]["target"]["ranks"] == "all"
    listed = crds_installed.kubectl("get", "stepscope", "-n", namespace, "-o", "name").stdout
    assert set(listed.split()) == {
        "profilesession.stepscope.dev/ddp-demo-profile",
        "profilesession.stepscope.dev/hung-check",
        "profileschedule.stepscope.dev/ddp-demo-baseline",
    }


def test_minimal_session_gets_every_default(crds_installed, namespace) -> None:
    crds_installed.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=session_manifest(
            "minimal", {"target": {"pytorchJob": "llama-ft"}, "window": {"startStep": None}}
        ),
    )
    stored = json.loads(
        crds_installed.kubectl("get", "pss", "minimal", "-n", namespace, "-o", "json").stdout
    )
    # An explicit null on an optional field is pruned: the same as leaving it out.
    assert (
        stored["spec"]
        == ProfileSessionSpec.model_validate({"target": {"pytorchJob": "llama-ft"}}).to_wire()
    )


# (spec, the field the server must name, words of the message). Each spec is also checked
# against pydantic, which must refuse it too; for CEL rules with the very same message.
INVALID_SESSIONS = {
    "two targets": (
        {"target": {"pytorchJob": "a", "trainJob": "b"}},
        "spec.target",
        "exactly one of pytorchJob, trainJob, jobSet or podSelector",
    ),
    "no target": (
        {"target": {"ranks": "all"}},
        "spec.target",
        "exactly one of pytorchJob, trainJob, jobSet or podSelector",
    ),
    "target missing": ({"granularity": "ops"}, "spec.target", "Required value"),
    "steps zero": (
        {"target": {"pytorchJob": "a"}, "window": {"steps": 0}},
        "spec.window.steps",
        "window.steps must be between 1 and 1000",
    ),
    "steps 1001": (
        {"target": {"pytorchJob": "a"}, "window": {"steps": 1001}},
        "spec.window.steps",
        "window.steps must be between 1 and 1000",
    ),
    "warmup 101": (
        {"target": {"pytorchJob": "a"}, "window": {"warmupSteps": 101}},
        "spec.window.warmupSteps",
        "window.warmupSteps must be between 0 and 100",
    ),
    "negative start": (
        {"target": {"pytorchJob": "a"}, "window": {"startStep": -5}},
        "spec.window.startStep",
        "window.startStep must be 0 or more",
    ),
    "timeout before lead": (
        {"target": {"pytorchJob": "a"}, "window": {"leadSeconds": 60, "timeoutSeconds": 30}},
        "spec.window.timeoutSeconds",
        "window.timeoutSeconds must be greater than window.leadSeconds",
    ),
    "too many windows": (
        {"target": {"pytorchJob": "a"}, "window": {"repeat": 11}},
        "spec.window.repeat",
        "window.repeat must be between 1 and 10",
    ),
    "repeat with a fixed start": (
        {"target": {"pytorchJob": "a"}, "window": {"repeat": 2, "startStep": 100}},
        "spec.window.repeat",
        "window.startStep cannot be combined with window.repeat above 1",
    ),
    "retention in days": (
        {"target": {"pytorchJob": "a"}, "artifacts": {"retention": "7d"}},
        "spec.artifacts.retention",
        "write 7 days as 168h",
    ),
    "retention without end": (
        {"target": {"pytorchJob": "a"}, "artifacts": {"retention": "99999999h"}},
        "spec.artifacts.retention",
        "artifacts.retention must be at most 8760h",
    ),
    "retention a second past a year": (
        {"target": {"pytorchJob": "a"}, "artifacts": {"retention": "8760h1s"}},
        "spec.artifacts.retention",
        "artifacts.retention must be at most 8760h",
    ),
    "ranks words": (
        {"target": {"pytorchJob": "a", "ranks": "first"}},
        "spec.target.ranks",
        "target.ranks must be 'all', 'one-per-node', or a comma-separated list",
    ),
    "ranks x": (
        {"target": {"pytorchJob": "a", "ranks": "x"}},
        "spec.target.ranks",
        "a comma-separated list of ranks and ranges such as '0,3,7' or '0-3,8'",
    ),
    "ranks backwards range": (
        {"target": {"pytorchJob": "a", "ranks": "3-1"}},
        "spec.target.ranks",
        "target.ranks has a range that runs backwards; write the lower rank first",
    ),
    "ranks with too many ranges": (
        {
            "target": {
                "pytorchJob": "a",
                "ranks": ",".join(f"{4 * i}-{4 * i + 1}" for i in range(33)),
            }
        },
        "spec.target.ranks",
        "target.ranks may hold at most 32 ranges",
    ),
    "bad job name": (
        {"target": {"pytorchJob": "Llama_FT"}},
        "spec.target.pytorchJob",
        "target.pytorchJob must be the name of a PyTorchJob",
    ),
    "empty selector": (
        {"target": {"podSelector": {}}},
        "spec.target.podSelector",
        "an empty selector would profile every pod",
    ),
    "In without values": (
        {"target": {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}},
        "spec.target.podSelector.matchExpressions[0].values",
        "In and NotIn need at least one",
    ),
    "unknown granularity": (
        {"target": {"pytorchJob": "a"}, "granularity": "trace"},
        "spec.granularity",
        "Unsupported value",
    ),
    "misspelt field": (
        {"target": {"pytorchJob": "a"}, "window": {"step": 5}},
        "spec.window.step",
        "field not declared in schema",
    ),
}


@pytest.mark.parametrize("case", INVALID_SESSIONS, ids=list(INVALID_SESSIONS))
def test_server_rejects_invalid_session(crds_installed, namespace, case: str) -> None:
    spec, field, words = INVALID_SESSIONS[case]
    result = crds_installed.kubectl(
        "apply",
        "--server-side",
        "-n",
        namespace,
        "-f",
        "-",
        input=session_manifest("bad", spec),
        check=False,
    )
    assert result.returncode != 0, f"the server accepted {spec}"
    assert field in result.stderr, result.stderr
    assert words in result.stderr, result.stderr
    assert crds_installed.kubectl("get", "pss", "-n", namespace, "-o", "name").stdout == ""

    with pytest.raises(ValidationError) as caught:
        ProfileSessionSpec.model_validate(spec)
    if any(words in message for message in CEL_MESSAGES):
        assert words in str(caught.value), "pydantic and CEL word the same rule differently"


@pytest.mark.parametrize(
    "ranks",
    [
        "0-3",
        "0,2-3",
        "5-5",
        ",".join(map(str, range(1024))),
        ",".join(f"{4 * i}-{4 * i + 2}" for i in range(32)),
    ],
    ids=["range", "list-and-range", "one-rank-range", "1024-ranks", "32-ranges"],
)
def test_server_accepts_rank_lists_and_ranges(crds_installed, namespace, ranks: str) -> None:
    crds_installed.kubectl(
        "apply",
        "--server-side",
        "-n",
        namespace,
        "-f",
        "-",
        input=session_manifest("ranged", {"target": {"pytorchJob": "a", "ranks": ranks}}),
    )
    stored = json.loads(
        crds_installed.kubectl("get", "pss", "ranged", "-n", namespace, "-o", "json").stdout
    )
    assert stored["spec"]["target"]["ranks"] == ranks
    assert ProfileSessionSpec.model_validate(stored["spec"]).target.ranks == ranks


INVALID_SCHEDULES = {
    "four cron fields": (
        {"schedule": "0 * * *"},
        "spec.schedule",
        "schedule must be a cron expression of five fields",
    ),
    "template with start step": (
        {"sessionTemplate": {"target": {"pytorchJob": "a"}, "window": {"startStep": 9}}},
        "spec.sessionTemplate.window.startStep",
        "every scheduled session plans its own start step",
    ),
    "history 0": ({"historyLimit": 0}, "spec.historyLimit", "historyLimit must be between"),
}


@pytest.mark.parametrize("case", INVALID_SCHEDULES, ids=list(INVALID_SCHEDULES))
def test_server_rejects_invalid_schedule(crds_installed, namespace, case: str) -> None:
    overrides, field, words = INVALID_SCHEDULES[case]
    spec = {
        "schedule": "0 * * * *",
        "sessionTemplate": {"target": {"pytorchJob": "a"}},
        **overrides,
    }
    manifest = json.dumps(
        {
            "apiVersion": "stepscope.dev/v1alpha1",
            "kind": "ProfileSchedule",
            "metadata": {"name": "bad"},
            "spec": spec,
        }
    )
    result = crds_installed.kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", input=manifest, check=False
    )
    assert result.returncode != 0, f"the server accepted {spec}"
    assert field in result.stderr and words in result.stderr, result.stderr
    with pytest.raises(ValidationError, match=words):
        ProfileScheduleSpec.model_validate(spec)


def table(cluster, path: str) -> dict:
    """GET `path` from the API server as a meta.k8s.io Table, as kubectl does."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    tls = ssl.create_default_context(
        cafile=config["clusters"][0]["cluster"]["certificate-authority"]
    )
    user = config["users"][0]["user"]
    tls.load_cert_chain(user["client-certificate"], user["client-key"])
    request = urllib.request.Request(cluster.api_url + path, headers={"Accept": TABLE})
    with urllib.request.urlopen(request, context=tls, timeout=30) as response:
        return json.load(response)


def test_printer_columns_come_from_the_server(crds_installed, namespace) -> None:
    crds_installed.kubectl(
        "apply", "--server-side", "-n", namespace, "-f", str(EXAMPLES / "profilesession.yaml")
    )
    crds_installed.kubectl(
        "patch",
        "pss",
        "ddp-demo-profile",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "phase": "Succeeded",
                    "target": "pytorchjob/ddp-demo",
                    "window": {"startStep": 1200, "endStep": 1204, "range": "1200-1204"},
                    "summary": {
                        "stepTimeMs": {"p50": 412.0, "p95": 430.5},
                        "stepTime": "412ms",
                        "bottleneck": "communication",
                    },
                }
            }
        ),
    )

    found = table(
        crds_installed, f"/apis/stepscope.dev/v1alpha1/namespaces/{namespace}/profilesessions"
    )
    assert found["kind"] == "Table"
    names = [column["name"] for column in found["columnDefinitions"]]
    assert names == [
        "Name",
        "Target",
        "Phase",
        "Window",
        "Step time",
        "Bottleneck",
        "Age",
        "Granularity",
        "Ranks",
        "Verdict",
    ]
    (row,) = found["rows"]
    assert row["cells"][:6] == [
        "ddp-demo-profile",
        "pytorchjob/ddp-demo",
        "Succeeded",
        "1200-1204",
        "412ms",
        "communication",
    ]

    shown = crds_installed.kubectl("get", "profilesessions", "-n", namespace, "-o", "wide").stdout
    header, line = shown.splitlines()
    assert header.split()[:7] == ["NAME", "TARGET", "PHASE", "WINDOW", "STEP", "TIME", "BOTTLENECK"]
    assert line.split()[:6] == [
        "ddp-demo-profile",
        "pytorchjob/ddp-demo",
        "Succeeded",
        "1200-1204",
        "412ms",
        "communication",
    ]


def test_schedule_printer_columns(crds_installed, namespace) -> None:
    crds_installed.kubectl(
        "apply", "--server-side", "-n", namespace, "-f", str(EXAMPLES / "profileschedule.yaml")
    )
    found = table(
        crds_installed, f"/apis/stepscope.dev/v1alpha1/namespaces/{namespace}/profileschedules"
    )
    assert [column["name"] for column in found["columnDefinitions"]] == [
        "Name",
        "Target",
        "Schedule",
        "Every",
        "Last session",
        "Last verdict",
        "Age",
        "Suspend",
        "Last schedule",
        "Last regression",
    ]
    # No status yet: the operator fills Target, Last session and Last verdict.
    cells = found["rows"][0]["cells"]
    assert cells[0] == "ddp-demo-baseline" and cells[2] == "0 */6 * * *"
    assert cells[7] is False


def test_explain_shows_the_field_docs(crds_installed) -> None:
    explained = crds_installed.kubectl("explain", "profilesession.spec.window.steps").stdout
    assert "Desired state. Number of consecutive global training steps" in explained
