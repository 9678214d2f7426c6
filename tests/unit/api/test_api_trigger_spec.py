"""ProfileTrigger specs through pydantic: the watched jobs, the bounds, the template rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from stepscope.api.crds import KINDS
from stepscope.api.trigger import (
    MAX_WATCHED_JOBS,
    ProfileTrigger,
    ProfileTriggerSpec,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "crds" / "examples" / "profiletrigger.yaml"
JOBS = {"kind": "pytorchJob", "names": ["llama-ft"]}


def test_example_loads_and_round_trips() -> None:
    trigger = ProfileTrigger.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    assert [t.pytorch_job for t in trigger.spec.jobs.targets()] == ["ddp-demo"]
    assert ProfileTrigger.model_validate(trigger.to_wire()) == trigger


def test_defaults_are_the_stated_ones() -> None:
    spec = ProfileTriggerSpec.model_validate({"jobs": JOBS})
    assert spec.interval_seconds == 30
    band = spec.rules.step_time_band
    assert (band.mad_multiplier, band.window, band.warmup_samples, band.consecutive) == (
        4.0,
        60,
        10,
        3,
    )
    assert spec.limits.cooldown_seconds == 3600
    assert spec.limits.daily_budget_per_job == 4
    assert spec.session_template.target is None


def test_a_pod_selector_job_is_one_target() -> None:
    spec = ProfileTriggerSpec.model_validate(
        {"jobs": {"kind": "podSelector", "podSelector": {"matchLabels": {"app": "x"}}}}
    )
    (target,) = spec.jobs.targets()
    assert target.pod_selector.match_labels == {"app": "x"}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"jobs": {"kind": "pytorchJob"}}, "names"),
        ({"jobs": {"kind": "podSelector", "names": ["a"]}}, "podSelector"),
        ({"jobs": {"kind": "pytorchJob", "names": []}}, "names"),
        ({"jobs": {"kind": "pytorchJob", "names": ["Bad_Name"]}}, "jobs.names[]"),
        (
            {"jobs": {"kind": "jobSet", "names": [f"j{i}" for i in range(MAX_WATCHED_JOBS + 1)]}},
            "names",
        ),
        ({"jobs": JOBS, "intervalSeconds": 4}, "intervalSeconds must be between 5 and 3600"),
        ({"jobs": JOBS, "limits": {"cooldownSeconds": 1}}, "limits.cooldownSeconds"),
        ({"jobs": JOBS, "limits": {"dailyBudgetPerJob": 1000}}, "limits.dailyBudgetPerJob"),
        (
            {"jobs": JOBS, "rules": {"stepTimeBand": {"window": 20, "warmupSamples": 30}}},
            "warmupSamples must not exceed",
        ),
        ({"jobs": JOBS, "rules": {"stepTimeBand": {"window": 100000}}}, "stepTimeBand.window"),
        (
            {"jobs": JOBS, "sessionTemplate": {"target": {"pytorchJob": "other"}}},
            "sessionTemplate.target must be unset",
        ),
        (
            {"jobs": JOBS, "sessionTemplate": {"window": {"startStep": 5}}},
            "sessionTemplate.window.startStep must be unset",
        ),
        ({"jobs": JOBS, "rules": {"dataWait": {"sharePct": 150.0}}}, "rules.dataWait.sharePct"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(spec: dict, field: str) -> None:
    with pytest.raises(ValidationError) as error:
        ProfileTriggerSpec.model_validate(spec)
    assert field in str(error.value)


def test_the_crd_prints_jobs_last_fired_why_and_session() -> None:
    (kind,) = [k for k in KINDS if k.plural == "profiletriggers"]
    names = [c["name"] for c in kind.columns if "priority" not in c]
    assert names == ["Jobs", "Last fired", "Why", "Session", "Age"]
