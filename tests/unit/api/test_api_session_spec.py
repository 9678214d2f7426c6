"""ProfileSession specs through pydantic: good ones load, bad ones name the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from stepscope.api import ProfileSession, ProfileSessionSpec, describe_target

EXAMPLE = Path(__file__).resolve().parents[3] / "crds" / "examples" / "profilesession.yaml"


def spec(**overrides) -> dict:
    """A valid wire-format spec with `overrides` merged in at the top level."""
    return {"target": {"pytorchJob": "llama-ft"}, **overrides}


def test_example_loads_and_round_trips() -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    session = ProfileSession.model_validate(document)
    assert session.spec.target.pytorch_job == "ddp-demo"
    assert session.spec.window.steps == 5
    assert session.spec.granularity == "ops"
    assert "namespace" not in session.metadata
    assert ProfileSession.model_validate(session.to_wire()) == session


def test_defaults_match_the_design() -> None:
    loaded = ProfileSessionSpec.model_validate(spec())
    assert loaded.target.ranks == "all"
    assert (loaded.window.steps, loaded.window.warmup_steps) == (5, 1)
    assert loaded.window.start_step is None
    assert (loaded.window.lead_seconds, loaded.window.timeout_seconds) == (10, 900)
    assert loaded.granularity == "ops"
    assert loaded.artifacts.retention is None
    assert loaded.baseline is None


def test_wire_format_is_camel_case_and_omits_unset_fields() -> None:
    wire = ProfileSessionSpec.model_validate(spec(window={"startStep": 1200})).to_wire()
    assert wire["target"] == {"pytorchJob": "llama-ft", "ranks": "all"}
    assert wire["window"]["startStep"] == 1200
    assert "warmupSteps" in wire["window"]
    assert "retention" not in wire["artifacts"]
    assert "baseline" not in wire


def test_python_names_are_accepted_too() -> None:
    loaded = ProfileSessionSpec(target={"train_job": "llm"}, window={"warmup_steps": 0})
    assert loaded.target.train_job == "llm"
    assert loaded.window.warmup_steps == 0


@pytest.mark.parametrize(
    "target",
    [
        {"pytorchJob": "a"},
        {"trainJob": "b.v2"},
        {"podSelector": {"matchLabels": {"app": "train"}}},
        {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
        {"pytorchJob": "a", "ranks": "one-per-node"},
        {"pytorchJob": "a", "ranks": "0,3,7"},
    ],
)
def test_good_targets(target: dict) -> None:
    ProfileSessionSpec.model_validate(spec(target=target))


@pytest.mark.parametrize(
    "retention", ["168h", "30m", "1h30m", "45s", "2h0m0s", "8760h", "525600m", "0008760h"]
)
def test_good_retentions(retention: str) -> None:
    ProfileSessionSpec.model_validate(spec(artifacts={"retention": retention}))


# Each bad spec, where pydantic reports it, and words the message must contain.
BAD_SPECS = {
    "no target": (spec(target={}), "target", "exactly one of pytorchJob, trainJob or podSelector"),
    "two targets": (
        spec(target={"pytorchJob": "a", "trainJob": "b"}),
        "target",
        "exactly one of pytorchJob, trainJob or podSelector",
    ),
    "steps zero": (spec(window={"steps": 0}), "window.steps", "between 1 and 1000"),
    "steps too many": (spec(window={"steps": 1001}), "window.steps", "between 1 and 1000"),
    "warmup too long": (
        spec(window={"warmupSteps": 101}),
        "window.warmupSteps",
        "between 0 and 100",
    ),
    "negative start step": (
        spec(window={"startStep": -1}),
        "window.startStep",
        "window.startStep must be 0 or more",
    ),
    "timeout before lead": (
        spec(window={"leadSeconds": 60, "timeoutSeconds": 30}),
        "window",
        "window.timeoutSeconds must be greater than window.leadSeconds",
    ),
    "steps as a string": (spec(window={"steps": "5"}), "window.steps", "valid integer"),
    "retention in days": (
        spec(artifacts={"retention": "7d"}),
        "artifacts.retention",
        "write 7 days as 168h",
    ),
    "retention zero": (spec(artifacts={"retention": "0h"}), "artifacts.retention", "positive"),
    "retention without end": (
        spec(artifacts={"retention": "99999999h"}),
        "artifacts.retention",
        "artifacts.retention must be at most 8760h",
    ),
    "retention a minute past a year": (
        spec(artifacts={"retention": "8760h1m"}),
        "artifacts.retention",
        "at most 8760h",
    ),
    "ranks words": (spec(target={"pytorchJob": "a", "ranks": "first"}), "target.ranks", "'0,3,7'"),
    "ranks trailing comma": (
        spec(target={"pytorchJob": "a", "ranks": "0,3,"}),
        "target.ranks",
        "comma-separated",
    ),
    "job name upper case": (
        spec(target={"pytorchJob": "Llama"}),
        "target.pytorchJob",
        "lower-case letters",
    ),
    "empty selector": (spec(target={"podSelector": {}}), "target.podSelector", "empty selector"),
    "In without values": (
        spec(target={"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
        "target.podSelector.matchExpressions.0",
        "In and NotIn need at least one value",
    ),
    "unknown granularity": (spec(granularity="trace"), "granularity", "'steps', 'ops' or 'full'"),
    "typo in a field": (spec(window={"step": 5}), "window.step", "Extra inputs"),
    "baseline without ref": (spec(baseline={}), "baseline.sessionRef", "Field required"),
}


@pytest.mark.parametrize("case", BAD_SPECS, ids=list(BAD_SPECS))
def test_bad_spec_names_field_and_fix(case: str) -> None:
    document, location, words = BAD_SPECS[case]
    with pytest.raises(ValidationError) as caught:
        ProfileSessionSpec.model_validate(document)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    assert ".".join(str(part) for part in errors[0]["loc"]) == location
    assert words in errors[0]["msg"]


@pytest.mark.parametrize(
    ("target", "described"),
    [
        ({"pytorchJob": "llama-ft"}, "pytorchjob/llama-ft"),
        ({"trainJob": "llm"}, "trainjob/llm"),
        (
            {
                "podSelector": {
                    "matchLabels": {"team": "a", "app": "train"},
                    "matchExpressions": [{"key": "gpu", "operator": "Exists"}],
                }
            },
            "pods/app=train,team=a,gpu Exists",
        ),
    ],
)
def test_describe_target(target: dict, described: str) -> None:
    assert (
        describe_target(ProfileSessionSpec.model_validate(spec(target=target)).target) == described
    )
