"""The README's `kubectl describe` block is what kubectl really prints.

The block follows a marker comment in README.md. A session from crds/examples is created on
the real API server, a finished status (tests/data/describe/, analysed from the straggler
scenario's real traces) is written through the status subresource, and real `kubectl describe`
output must contain the block: its lines are compared exactly, in order, and a line ``...``
stands for lines the README leaves out. A changed model, status or kubectl shows here first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.operator_helpers import write_session_status

from stepscope.api import ProfileSessionStatus

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
README = REPO_ROOT / "README.md"
EXAMPLE = REPO_ROOT / "crds" / "examples" / "profilesession.yaml"
STATUS = REPO_ROOT / "tests" / "data" / "describe" / "ddp-demo-profile.status.json"
MARKER = (
    "<!-- kubectl-describe: tests/integration/api/test_readme_describe.py checks this block -->"
)
ELISION = "..."


def readme_block() -> list[str]:
    """The lines of the fenced block right after the marker, without its ``$`` command line."""
    text = README.read_text(encoding="utf-8")
    assert MARKER in text, f"README.md lost the marker {MARKER!r} above its describe block"
    after = text.split(MARKER, 1)[1].lstrip("\n")
    assert after.startswith("```"), "the describe block must follow the marker directly"
    body = after.split("\n", 1)[1].split("```", 1)[0]
    return [line.rstrip() for line in body.splitlines() if not line.startswith("$ ")]


def first_unmatched(block: list[str], printed: list[str]) -> str | None:
    """The first README line not found where it should be, or None when all match.

    Lines between two ``...`` must appear consecutively, and each run after the previous one.
    """
    runs: list[list[str]] = [[]]
    for line in block:
        if line.strip() == ELISION:
            runs.append([])
        else:
            runs[-1].append(line)
    position = 0
    for index, run in enumerate(runs):
        if not run:
            continue
        # The first run is anchored at the top of the output unless the block opens with "...".
        anchored = index == 0
        starts = [position] if anchored else range(position, len(printed) - len(run) + 1)
        found = next((s for s in starts if printed[s : s + len(run)] == run), None)
        if found is None:
            # Name the first line that is not there at all, else the run's first line.
            return next((line for line in run if line not in printed[position:]), run[0])
        position = found + len(run)
    return None


def test_readme_describe_block_is_real_kubectl_output(crds_installed, namespace) -> None:
    session = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    name = session["metadata"]["name"]
    crds_installed.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(session))
    status = ProfileSessionStatus.model_validate_json(STATUS.read_text(encoding="utf-8"))
    write_session_status(crds_installed, namespace, name, status)
    printed = crds_installed.kubectl("describe", "profilesession", name, "-n", namespace).stdout
    # The README shows the demo's namespace; this test ran in a fresh one.
    lines = [line.rstrip().replace(namespace, "default") for line in printed.splitlines()]
    missing = first_unmatched(readme_block(), lines)
    assert missing is None, (
        f"README.md's describe block differs from real kubectl output at {missing!r}; "
        "replace the block with (an excerpt of) this output:\n" + "\n".join(lines)
    )


def test_the_comparison_refuses_a_block_kubectl_does_not_print() -> None:
    printed = ["Name:  x", "Status:", "  Phase:  Succeeded", "  Summary:", "    Bottleneck:  idle"]
    assert first_unmatched(["Name:  x", ELISION, "    Bottleneck:  idle"], printed) is None
    assert first_unmatched(["Status:", "  Phase:  Succeeded"], printed) == "Status:"
    assert first_unmatched(["Name:  x", ELISION, "Phase:  Succeeded"], printed) is not None
    assert first_unmatched(["Name:  x", ELISION, "  Summary:", "  Phase:  Succeeded"], printed)
