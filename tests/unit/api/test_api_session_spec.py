"""ProfileSession specs through pydantic: good ones load, bad ones name the field and the fix."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from stepscope.api import ProfileSession, ProfileSessionSpec, TargetKind, describe_target
from stepscope.api.rules import parse_duration, parse_rank_list
from stepscope.api.session import TargetSpec

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
    # Unset steps: the operator derives the length from the rank count (window_length.py).
    assert (loaded.window.steps, loaded.window.warmup_steps) == (None, 1)
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
    ("target", "described", "ranks"),
    [
        ({"pytorchJob": "a"}, "pytorchjob/a", "all"),
        ({"trainJob": "b.v2"}, "trainjob/b.v2", "all"),
        ({"podSelector": {"matchLabels": {"app": "train"}}}, "pods/app=train", "all"),
        (
            {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
            "pods/app Exists",
            "all",
        ),
        ({"pytorchJob": "a", "ranks": "one-per-node"}, "pytorchjob/a", "one-per-node"),
        ({"pytorchJob": "a", "ranks": "0,3,7"}, "pytorchjob/a", {0, 3, 7}),
        ({"pytorchJob": "a", "ranks": "0-3"}, "pytorchjob/a", {0, 1, 2, 3}),
        ({"pytorchJob": "a", "ranks": "0,2-3,9"}, "pytorchjob/a", {0, 2, 3, 9}),
        ({"pytorchJob": "a", "ranks": "5-5"}, "pytorchjob/a", {5}),
    ],
)
def test_good_targets(target: dict, described: str, ranks: str | set[int]) -> None:
    loaded = ProfileSessionSpec.model_validate(spec(target=target)).target
    assert describe_target(loaded) == described
    if isinstance(ranks, set):
        assert parse_rank_list(loaded.ranks) == ranks
    else:
        assert loaded.ranks == ranks


@pytest.mark.parametrize(
    ("retention", "expected"),
    [
        ("168h", timedelta(days=7)),
        ("30m", timedelta(minutes=30)),
        ("1h30m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("2h0m0s", timedelta(hours=2)),
        ("8760h", timedelta(days=365)),
        ("525600m", timedelta(days=365)),
        ("0008760h", timedelta(days=365)),
    ],
)
def test_good_retentions(retention: str, expected: timedelta) -> None:
    loaded = ProfileSessionSpec.model_validate(spec(artifacts={"retention": retention}))
    assert loaded.artifacts.retention == retention
    assert parse_duration(loaded.artifacts.retention) == expected


# Each bad spec, where pydantic reports it, and words the message must contain.
BAD_SPECS = {
    "no target": (
        spec(target={}),
        "target",
        "exactly one of pytorchJob, trainJob, jobSet or podSelector",
    ),
    "two targets": (
        spec(target={"pytorchJob": "a", "trainJob": "b"}),
        "target",
        "exactly one of pytorchJob, trainJob, jobSet or podSelector",
    ),
    "job set and train job": (
        spec(target={"jobSet": "a", "trainJob": "b"}),
        "target",
        "exactly one of pytorchJob, trainJob, jobSet or podSelector",
    ),
    "job set name upper case": (
        spec(target={"jobSet": "Big"}),
        "target.jobSet",
        "the name of a JobSet in this namespace",
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
    "no windows": (spec(window={"repeat": 0}), "window.repeat", "between 1 and 10"),
    "too many windows": (spec(window={"repeat": 11}), "window.repeat", "between 1 and 10"),
    "repeat with a fixed start": (
        spec(window={"repeat": 3, "startStep": 500}),
        "window",
        "unset startStep or set repeat to 1",
    ),
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
    "ranks backwards range": (
        spec(target={"pytorchJob": "a", "ranks": "0,3-1"}),
        "target.ranks",
        "runs backwards; write the lower rank first",
    ),
    "ranks with too many ranges": (
        spec(
            target={"pytorchJob": "a", "ranks": ",".join(f"{4 * i}-{4 * i + 1}" for i in range(33))}
        ),
        "target.ranks",
        "at most 32 ranges",
    ),
    "ranks open range": (
        spec(target={"pytorchJob": "a", "ranks": "2-"}),
        "target.ranks",
        "ranks and ranges such as '0,3,7' or '0-3,8'",
    ),
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
        ({"jobSet": "big-run"}, "jobset/big-run"),
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


def test_every_target_field_is_a_target_kind() -> None:
    fields = {f.alias for name, f in TargetSpec.model_fields.items() if name != "ranks"}
    assert fields == {kind.value for kind in TargetKind}


@pytest.mark.parametrize(
    ("target", "kind", "ref"),
    [
        ({"pytorchJob": "llama-ft"}, TargetKind.PYTORCH_JOB, "llama-ft"),
        ({"trainJob": "llm"}, TargetKind.TRAIN_JOB, "llm"),
        ({"jobSet": "big-run", "ranks": "0,1"}, TargetKind.JOB_SET, "big-run"),
        (
            {"podSelector": {"matchLabels": {"app": "train"}}},
            TargetKind.POD_SELECTOR,
            {"matchLabels": {"app": "train"}, "matchExpressions": []},
        ),
    ],
)
def test_the_set_target_field_gives_kind_and_wire_ref(target: dict, kind, ref) -> None:
    loaded = ProfileSessionSpec.model_validate(spec(target=target)).target
    assert (loaded.kind, loaded.ref) == (kind, ref)
    assert loaded.ref_of(kind) is not None
    assert [other for other in TargetKind if loaded.ref_of(other) is not None] == [kind]
