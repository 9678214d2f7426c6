"""The README's describe example: the excerpt rule, the block's rewrite, and a status derived
from the straggler scenario that says what the scenario was built to show."""

from __future__ import annotations

from stepscope_dev.describe_example import (
    ELISION,
    MARKER,
    PODS,
    README,
    derive_status,
    excerpt,
    readme_block,
    with_block,
)

DESCRIBED = [
    "Name:         ddp-demo-profile",
    "Namespace:    default",
    "Labels:       <none>",
    "API Version:  stepscope.dev/v1alpha1",
    "Spec:",
    "  Granularity:  ops",
    "Status:",
    "  Conditions:",
    "    Message:  all 4 ranks captured",
    "  Phase:  Succeeded",
    "  Ranks:",
    "    Captured:    4",
    "    Expected:    4",
    "    Misaligned:  0",
    "  Summary:",
    "    Bottleneck:  straggler",
    "    Findings:",
    "      Id:  straggler-rank",
    "  Target:  pytorchjob/ddp-demo",
    "  Window:",
    "    End Step:  1204",
    "    Range:     1200-1204",
    "Events:  <none>",
]


def test_the_excerpt_keeps_the_chosen_paths_with_their_headers_and_elides_the_rest():
    assert excerpt(DESCRIBED) == [
        "Name:         ddp-demo-profile",
        "Namespace:    default",
        ELISION,
        "Status:",
        ELISION,
        "  Phase:  Succeeded",
        "  Ranks:",
        "    Captured:    4",
        "    Expected:    4",
        ELISION,
        "  Summary:",
        "    Bottleneck:  straggler",
        "    Findings:",
        "      Id:  straggler-rank",
        "  Target:  pytorchjob/ddp-demo",
        "  Window:",
        ELISION,
        "    Range:     1200-1204",
    ]


def test_a_rewritten_block_reads_back_and_leaves_the_rest_of_the_readme_alone():
    text = f"intro\n{MARKER}\n```\n$ kubectl describe x\nold\n```\n\nafter the block\n"
    rewritten = with_block(text, ["Name:  new", ELISION, "  Phase:  Failed"], "x")
    assert readme_block(rewritten) == ["Name:  new", ELISION, "  Phase:  Failed"]
    assert rewritten.startswith("intro\n") and rewritten.endswith("\n\nafter the block\n")


def test_the_readme_has_the_marked_block():
    assert readme_block(README.read_text(encoding="utf-8"))


def test_the_derived_status_names_the_rank_the_scenario_slows():
    """The scenario's rank 2 sleeps outside any operator every step: the analysis must name it
    the straggler, with its pod, and say so in a finding."""
    summary = derive_status().summary
    assert summary.straggler is not None
    assert (summary.straggler.rank, summary.straggler.pod) == (2, PODS[2])
    assert "straggler-rank" in {finding.id for finding in summary.findings}
