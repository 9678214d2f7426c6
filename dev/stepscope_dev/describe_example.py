"""The README's `kubectl describe` example, derived from the current code, never frozen.

The session is crds/examples/profilesession.yaml. Its status is what the operator writes for a
finished session whose ranks left the straggler scenario's real traces
(tests/data/scenarios/straggler): the current analysis summarises and merges them, and the
operator's own functions turn the result into the summary, the verdict line and the conditions.
Only the session's circumstances are stated here: its pods and node, its window.

`make docs-examples` prints that status through real `kubectl describe` on a local control plane
and rewrites the README's block with an excerpt (``KEPT``); the integration test
tests/integration/api/test_readme_describe.py derives it again and fails when the block differs,
so a change in the analysis shows up as a diff in the README.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from stepscope_operator.sessions.collecting import merge_job
from stepscope_operator.sessions.status import (
    ANALYZED,
    CAPTURED,
    READY,
    final_phase,
    ready_condition,
    set_condition,
    summary_from_job,
    verdict_line,
)
from stepscope_operator.targets.resolving import RankTarget

from stepscope.analysis import summarize_rank
from stepscope.api.phases import Reason
from stepscope.api.session_status import ProfileSessionStatus, RanksStatus, StatusWindow
from stepscope_dev.readme_blocks import block_lines, rewrite_block, with_block_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
EXAMPLE = REPO_ROOT / "crds" / "examples" / "profilesession.yaml"
SCENARIO = REPO_ROOT / "tests" / "data" / "scenarios" / "straggler"
MARKER = "<!-- kubectl-describe: make docs-examples writes this block; a test checks it -->"
ELISION = "..."
NAMESPACE = "default"

# The session's circumstances, which the traces do not carry: the PyTorchJob's pods in rank
# order (master first, as the training operator numbers them), the node they ran on, the window.
JOB = "ddp-demo"
PODS = (f"{JOB}-master-0", f"{JOB}-worker-0", f"{JOB}-worker-1", f"{JOB}-worker-2")
NODE = "stepscope-local-0"
WINDOW_STEPS = (1200, 1204)
WINDOW_TIMES = (
    datetime(2026, 12, 1, 9, 14, 1, tzinfo=UTC),
    datetime(2026, 12, 1, 9, 14, 3, tzinfo=UTC),
)
ANALYZED_AT = datetime(2026, 12, 1, 9, 14, 5, tzinfo=UTC)

# What the README keeps of the describe output: these paths with everything under them, and the
# section headers above them. Every other run of lines becomes one "...".
KEPT: tuple[tuple[str, ...], ...] = (
    ("Name",),
    ("Namespace",),
    ("Status", "Phase"),
    ("Status", "Ranks", "Captured"),
    ("Status", "Ranks", "Expected"),
    ("Status", "Summary"),
    ("Status", "Target"),
    ("Status", "Window", "Range"),
)


def derive_status(scenario: Path = SCENARIO) -> ProfileSessionStatus:
    """The finished session's status, from the scenario's traces through the current code."""
    summaries = [summarize_rank(path) for path in sorted(scenario.glob("rank-*.json.gz"))]
    targets = [
        RankTarget(rank=rank, pod=pod, namespace=NAMESPACE, node=NODE)
        for rank, pod in enumerate(PODS)
    ]
    job = merge_job(summaries, targets)
    # No probe ran before this window, so there is no unprofiled step time to compare with.
    summary = summary_from_job(job, None)
    ranks = RanksStatus.tally(
        expected=len(targets), captured=len(summaries), misaligned=0, missing=(), failed=()
    )
    phase, reason, message = final_phase(ranks)
    analyzed = verdict_line(job, summary)
    conditions = set_condition([], CAPTURED, "True", reason, message, 1, WINDOW_TIMES[1])
    conditions = set_condition(
        conditions, ANALYZED, "True", Reason.ANALYZED, analyzed, 1, ANALYZED_AT
    )
    ready = ready_condition(phase, reason, f"{message}; {analyzed}")
    conditions = set_condition(conditions, READY, *ready, 1, ANALYZED_AT)
    return ProfileSessionStatus.model_validate(
        ProfileSessionStatus(
            phase=phase,
            observed_generation=1,
            conditions=conditions,
            target=f"pytorchjob/{JOB}",
            window=StatusWindow(
                start_step=WINDOW_STEPS[0],
                end_step=WINDOW_STEPS[1],
                start_time=WINDOW_TIMES[0],
                end_time=WINDOW_TIMES[1],
            ),
            ranks=ranks,
            summary=summary,
        ).model_dump()
    )


def example_session() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))


def _path_of(lines: Sequence[str]) -> list[tuple[str, ...]]:
    """Each describe line's path of keys, from its indentation; a line without a key belongs
    to the line above it."""
    paths: list[tuple[str, ...]] = []
    stack: list[tuple[int, str]] = []
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        key, colon, _ = line.strip().partition(":")
        if not colon or not key:
            paths.append(paths[-1] if paths else ())
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        paths.append(tuple(k for _, k in stack))
    return paths


def excerpt(lines: Sequence[str], kept_paths: Sequence[tuple[str, ...]] = KEPT) -> list[str]:
    """The README's excerpt of describe output: kept paths, their headers, and "..." between."""
    out: list[str] = []
    for line, path in zip(lines, _path_of(lines), strict=True):
        kept = any(path[: len(k)] == k or k[: len(path)] == path for k in kept_paths)
        if kept:
            out.append(line.rstrip())
        elif not out or out[-1] != ELISION:
            out.append(ELISION)
    while out and out[-1] == ELISION:
        out.pop()
    return out


def readme_block(text: str) -> list[str]:
    """The README's describe block, without its ``$`` command line."""
    return block_lines(text, MARKER)


def with_block(text: str, lines: Sequence[str], name: str) -> str:
    """README text with the describe block replaced by ``lines``."""
    return with_block_lines(text, MARKER, f"kubectl describe profilesession {name}", lines)


def describe_lines(cluster: Any, namespace: str) -> list[str]:
    """Create the example session in ``namespace``, write the derived status through the status
    subresource, and return what real `kubectl describe` prints, namespace as in the README."""
    return described(cluster, namespace, example_session(), derive_status())


def described(
    cluster: Any, namespace: str, session: dict[str, Any], status: ProfileSessionStatus
) -> list[str]:
    """What real `kubectl describe` prints for ``session`` created in ``namespace`` with
    ``status`` written through the status subresource; the namespace printed as NAMESPACE."""
    name = session["metadata"]["name"]
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(session))
    cluster.kubectl(
        "patch",
        "profilesession",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status.to_wire()}),
    )
    printed = cluster.kubectl("describe", "profilesession", name, "-n", namespace).stdout
    return [line.rstrip().replace(namespace, NAMESPACE) for line in printed.splitlines()]


def printed_on_local_cluster(describe: Callable[[Any, str], list[str]]) -> list[str]:
    """``describe(cluster, NAMESPACE)`` on a local control plane started for it, with the CRDs."""
    from stepscope_dev import build
    from stepscope_dev.cluster import start_cluster, stop_cluster

    with tempfile.TemporaryDirectory(prefix="stepscope-docs-") as root:
        cluster = start_cluster(Path(root), build.ensure_binaries(), die_with_parent=True)
        try:
            cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
            return describe(cluster, NAMESPACE)
        finally:
            stop_cluster(cluster)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md is not current")
    args = parser.parse_args(argv)
    lines = excerpt(printed_on_local_cluster(describe_lines))
    name = example_session()["metadata"]["name"]
    command = f"kubectl describe profilesession {name}"
    return rewrite_block(README, MARKER, command, lines, "describe", args.check)


if __name__ == "__main__":
    raise SystemExit(main())
