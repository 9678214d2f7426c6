"""What each tier's trace really holds, from a real torch.profiler run on the CPU through the
window driver, checked against the tier table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from stepscope_agent import messages
from stepscope_agent.stepping import StepCounter
from stepscope_agent.windowing import WindowDriver

from stepscope.api.agent import CaptureRequest
from stepscope.tiers import TIERS, SummaryKind, Tier, tier_profile


def capture(tmp_path: Path, tier: Tier) -> messages.WindowFinished:
    """Three real training steps, a two-step window at `tier` over steps 1-2."""
    sent: list[messages.Message] = []
    driver = WindowDriver(tmp_path, lambda: 0, sent.append)
    counter = StepCounter(driver.at_boundary)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    arm = messages.Arm(
        capture_id=f"tier-{tier}",
        start_step=1,
        steps=2,
        warmup_steps=1,
        tier=tier,
        trace=tier_profile(tier).traces,
    )
    driver.arm(arm, counter.current)
    for _ in range(4):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        counter.explicit_step(None)
    (finished,) = [m for m in sent if isinstance(m, messages.WindowFinished)]
    return finished


def contents(trace_file: str) -> dict[str, int]:
    events = json.loads(Path(trace_file).read_text())["traceEvents"]
    return {
        "shapes": sum("Input Dims" in (e.get("args") or {}) for e in events),
        "stacks": sum(e.get("cat") == "python_function" for e in events),
        "memory": sum(e.get("name") == "[memory]" for e in events),
        "ops": sum(e.get("cat") == "cpu_op" for e in events),
    }


def test_full_records_shapes_stacks_and_memory_events(tmp_path):
    found = contents(capture(tmp_path, Tier.FULL).trace_file)
    assert found["ops"] > 0
    assert found["shapes"] > 0, found
    assert found["stacks"] > 0, found
    assert found["memory"] > 0, found


def test_ops_records_operators_but_no_shapes_stacks_or_memory(tmp_path):
    found = contents(capture(tmp_path, Tier.OPS).trace_file)
    assert found["ops"] > 0
    assert (found["shapes"], found["stacks"], found["memory"]) == (0, 0, 0), found


def test_steps_writes_no_trace_file_at_all(tmp_path):
    finished = capture(tmp_path, Tier.STEPS)
    assert finished.trace_file is None and finished.export_stall_ms is None
    assert [s["step"] for s in finished.steps] == [1, 2]
    assert list(tmp_path.iterdir()) == []


def test_the_table_covers_every_tier_and_says_what_its_summary_holds():
    assert set(TIERS) == set(Tier)
    for tier, profile in TIERS.items():
        assert profile.tier is tier
        assert profile.summary == (
            SummaryKind.TRACE if profile.traces else SummaryKind.STEP_TIMINGS
        )
    # Shapes can be sensitive: only the full tier records them.
    assert [t for t, p in TIERS.items() if p.record_shapes] == [Tier.FULL]


@pytest.mark.parametrize("tier", list(Tier))
def test_a_capture_request_traces_exactly_when_the_table_says(tier):
    grant = {"key": "k", "expiresAt": "2030-01-01T00:00:00Z", "putUrl": "http://s3/x"}
    request = CaptureRequest.model_validate(
        {
            "captureId": "c",
            "startStep": 10,
            "steps": 2,
            "tier": tier.value,
            "deadline": "2030-01-01T00:00:00Z",
            "maxBytesPerRank": 1024,
            "grants": [
                {"rank": 0, "trace": grant, "counters": grant, "summary": grant, "steps": grant}
            ],
        }
    )
    assert request.takes_trace(0) is TIERS[tier].traces


def test_an_unknown_tier_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown tier 'everything'; use one of steps, ops, full"):
        tier_profile("everything")
