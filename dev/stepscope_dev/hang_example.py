"""The README's hang-check `kubectl describe` example, derived from the current code.

The session is crds/examples/hangcheck.yaml. Its status is what the operator writes when it
diagnoses a hang from the dumps in tests/data/hangs/missing_rank: real agents' answers to
``POST /v1/hang-dumps`` while rank 2 of a 4-rank DDP job blocked in its data loading
(tests/data/hangs/generate.py recorded them). The current attribution reads them and the
operator's own functions turn its verdict into the status; only the session's circumstances
are stated here: its pods' node, when the stall was seen and how long it had lasted.

`make docs-examples` prints that status through real `kubectl describe` on a local control plane
and rewrites the README's block; tests/integration/api/test_readme_describe.py derives it again
and fails when the block differs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from stepscope_operator.hang.diagnosis import diagnosis_from_verdict, placement_of
from stepscope_operator.sessions.status import READY, ready_condition, set_condition
from stepscope_operator.targets.resolving import RankTarget

from stepscope.api.hang_dump import PodHangDumps
from stepscope.api.phases import Phase, Reason
from stepscope.api.session_status import ProfileSessionStatus
from stepscope.hang.attribution import attribute_hang
from stepscope.hang.detection import StallJudgement
from stepscope.storage import SessionArtifact, s3_uri, session_key, session_prefix
from stepscope_dev.describe_example import (
    NAMESPACE,
    README,
    described,
    excerpt,
    printed_on_local_cluster,
)
from stepscope_dev.readme_blocks import block_lines, rewrite_block

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "crds" / "examples" / "hangcheck.yaml"
DUMPS = REPO_ROOT / "tests" / "data" / "hangs" / "missing_rank"
MARKER = "<!-- hang-describe: make docs-examples writes this block; a test checks it -->"

# The circumstances the dumps do not carry: the node the pods ran on, and what the hang watch
# saw (no step on any rank for STALLED_S, past the session's 15 s threshold floor) at DETECTED_AT.
NODE = "stepscope-node-0"
DETECTED_AT = datetime(2026, 12, 1, 9, 20, 6, tzinfo=UTC)
STALLED_S = 15.2
# Where the operator stores the report: its default bucket and prefix, the session's uid.
BUCKET, PREFIX, UID = "stepscope", "stepscope", "6d884c05-a891-4916-a82a-63ff019dabd4"

KEPT: tuple[tuple[str, ...], ...] = (
    ("Name",),
    ("Namespace",),
    ("Spec", "Hang Check"),
    ("Spec", "Mode"),
    ("Spec", "Target"),
    ("Status", "Conditions"),
    ("Status", "Hang"),
    ("Status", "Phase"),
    ("Status", "Target"),
)


def example_session() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))


def derive_status(dumps: Path = DUMPS) -> ProfileSessionStatus:
    """The diagnosed session's status, from the recorded dumps through the current code."""
    answers = [
        PodHangDumps.model_validate_json(p.read_text()) for p in sorted(dumps.glob("*.json"))
    ]
    ranks = [rank for answer in answers for rank in answer.ranks]
    targets = [
        RankTarget(rank=rank.rank, pod=answer.pod, namespace=NAMESPACE, node=NODE)
        for answer in answers
        for rank in answer.ranks
    ]
    spec = example_session()["spec"]["hangCheck"]
    verdict = attribute_hang(ranks, placement_of(targets))
    judgement = StallJudgement(
        stalled=True,
        threshold_s=float(spec["thresholdFloorSeconds"]),
        stalled_s=STALLED_S,
        last_step=max(rank.step for rank in ranks if rank.step is not None),
        p95_ms=None,
        ranks=len(ranks),
    )
    name = example_session()["metadata"]["name"]
    report = session_key(session_prefix(PREFIX, NAMESPACE, name, UID), SessionArtifact.HANG_REPORT)
    diagnosis = diagnosis_from_verdict(verdict, judgement, DETECTED_AT, s3_uri(BUCKET, report))
    notes = [note for answer in answers for note in answer.notes]
    message = diagnosis.message + (f" (notes: {'; '.join(notes[:3])})" if notes else "")
    ready = ready_condition(Phase.DIAGNOSED, Reason.HANG_DIAGNOSED, message)
    return ProfileSessionStatus.model_validate(
        ProfileSessionStatus(
            phase=Phase.DIAGNOSED,
            observed_generation=1,
            conditions=set_condition([], READY, *ready, 1, DETECTED_AT),
            target=f"pytorchjob/{example_session()['spec']['target']['pytorchJob']}",
            hang=diagnosis,
        ).model_dump()
    )


def describe_lines(cluster: Any, namespace: str) -> list[str]:
    return described(cluster, namespace, example_session(), derive_status())


def readme_block(text: str) -> list[str]:
    return block_lines(text, MARKER)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md is not current")
    args = parser.parse_args(argv)
    lines = excerpt(printed_on_local_cluster(describe_lines), KEPT)
    command = f"kubectl describe profilesession {example_session()['metadata']['name']}"
    return rewrite_block(README, MARKER, command, lines, "hang-check describe", args.check)


if __name__ == "__main__":
    raise SystemExit(main())
