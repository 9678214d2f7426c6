"""Every metric's labels hold Kubernetes object names or words from a fixed set, so a
tenant's selector or free text can neither reach a scraper nor add series without bound."""

import re
import uuid

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase
from stepscope_operator import metrics
from stepscope_operator.metrics import name_label, record_finished_session, target_label

from stepscope.api.rules import NAME_PATTERN
from stepscope.api.session import TargetSpec
from stepscope.api.session_status import ProfileSessionStatus

# Labels whose values are Kubernetes object names (the target as kind/name).
OBJECT_NAME_LABELS = {"namespace", "schedule", "target"}
# Labels whose values come from a fixed vocabulary the operator writes.
VOCABULARY_LABELS = {"phase", "verdict", "quantile", "category", "call"}
TARGET_VALUE = re.compile(r"^(pytorchjob|trainjob|jobset|profilesession)/(?P<name>.+)$")

SELECTOR = {
    "matchLabels": {"team": "alpha", "run": "secret-experiment-42"},
    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}],
}


def _collectors():
    return [c for c in vars(metrics).values() if isinstance(c, MetricWrapperBase)]


def _finished(**fields):
    return ProfileSessionStatus.model_validate(
        {
            "phase": "Succeeded",
            "summary": {
                "stepTimeMs": {"p50": 400.0, "p95": 420.0},
                "breakdown": {
                    "compute": 60.0,
                    "exposedCommunication": 20.0,
                    "dataLoading": 5.0,
                    "hostOverhead": 5.0,
                    "idle": 10.0,
                },
            },
            "artifacts": {"bytes": 1024},
            **fields,
        }
    )


def test_every_metric_is_labelled_from_the_allowed_set():
    collectors = _collectors()
    assert len(collectors) >= 11, "the metrics module's collectors were not found"
    for collector in collectors:
        unexpected = set(collector._labelnames) - OBJECT_NAME_LABELS - VOCABULARY_LABELS
        assert not unexpected, f"{collector._name} has labels outside the allowed set"


def test_a_pod_selector_session_is_labelled_by_its_own_name_never_its_selector():
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    target = TargetSpec.model_validate({"podSelector": SELECTOR})
    record_finished_session(namespace, "probe-7", target, _finished())

    values = [
        sample.labels
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("namespace") == namespace
    ]
    assert {labels.get("target") for labels in values} == {"profilesession/probe-7", None}
    for labels in values:
        for name, value in labels.items():
            assert "secret" not in value and "=" not in value and "gold" not in value
            if name in ("namespace", "schedule"):
                assert re.fullmatch(NAME_PATTERN, value), (name, value)
            if name == "target":
                assert re.fullmatch(NAME_PATTERN, TARGET_VALUE.fullmatch(value)["name"])


def test_a_named_job_is_labelled_kind_slash_name():
    target = TargetSpec.model_validate({"pytorchJob": "llama-ft"})
    assert target_label("any-session", target) == "pytorchjob/llama-ft"
    assert target_label("s", TargetSpec.model_validate({"jobSet": "js.1"})) == "jobset/js.1"


@pytest.mark.parametrize(
    "text",
    [
        "team=alpha,run in (a,b)",
        "pods/app=trainer",
        "Upper-Case",
        "free text with spaces",
        "x" * 254,
        "",
    ],
)
def test_text_that_is_no_object_name_is_refused_as_a_label(text):
    with pytest.raises(ValueError, match="not a Kubernetes object name"):
        name_label(text)
    with pytest.raises(ValueError, match="not a Kubernetes object name"):
        record_finished_session(text, "s", TargetSpec.model_validate({"jobSet": "j"}), _finished())
