"""Free text in status is clipped where it is made, to the length the CRD allows.

A status write used to fail when an upload error quoted its object key (about 156
characters) in a 128-character field; the session then retried until it gave up.
"""

from __future__ import annotations

import pytest
import yaml

from stepscope.api.crdgen import DEFAULT_OUT
from stepscope.api.meta import CONDITION_MESSAGE_MAX_LENGTH
from stepscope.api.session_status import (
    FAILURE_REASON_MAX_LENGTH,
    POD_NAME_MAX_LENGTH,
    TARGET_MAX_LENGTH,
    ProfileSessionStatus,
    RankFailure,
)
from stepscope.api.text import ELLIPSIS, clip_text
from stepscope.api.verdict import FINDING_TEXT_MAX_LENGTH

UPLOAD_ERROR = (
    "upload failed: PUT s3://stepscope/team-a/llama-ft-1/6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f/"
    "rank-5/trace.json.gz -> 403 SignatureDoesNotMatch: the request signature we calculated "
    "does not match the signature you provided; check your key and signing method"
)


def _status_schema() -> dict:
    crd = yaml.safe_load((DEFAULT_OUT / "stepscope.dev_profilesessions.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


def test_a_long_upload_error_becomes_a_valid_clipped_reason() -> None:
    assert len(UPLOAD_ERROR) > 250
    failure = RankFailure(rank=5, pod="llama-ft-worker-4", reason=UPLOAD_ERROR)
    assert len(failure.reason) == FAILURE_REASON_MAX_LENGTH
    assert failure.reason == UPLOAD_ERROR[: FAILURE_REASON_MAX_LENGTH - 1] + ELLIPSIS
    # The clipped value survives the round trip through the wire form unchanged.
    assert RankFailure.model_validate(failure.to_wire()) == failure


def test_short_text_is_left_alone() -> None:
    assert clip_text("upload timed out", FAILURE_REASON_MAX_LENGTH) == "upload timed out"
    assert clip_text("x" * 128, 128) == "x" * 128


def test_non_strings_are_still_refused() -> None:
    with pytest.raises(ValueError, match="string"):
        RankFailure(rank=1, reason=42)


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        (("ranks", "failed", "reason"), FAILURE_REASON_MAX_LENGTH),
        (("ranks", "failed", "pod"), POD_NAME_MAX_LENGTH),
        (("ranks", "missing", "pod"), POD_NAME_MAX_LENGTH),
        (("summary", "findings", "evidence"), FINDING_TEXT_MAX_LENGTH),
        (("summary", "findings", "recommendation"), FINDING_TEXT_MAX_LENGTH),
        (("summary", "straggler", "node"), POD_NAME_MAX_LENGTH),
        (("conditions", "message"), CONDITION_MESSAGE_MAX_LENGTH),
        (("target",), TARGET_MAX_LENGTH),
    ],
)
def test_crd_max_length_is_the_clip_length(path, limit) -> None:
    node = _status_schema()
    for name in path:
        node = node["properties"][name]
        node = node.get("items", node)
    assert node["maxLength"] == limit


def test_every_clipped_field_fills_a_status_that_validates() -> None:
    long = "z" * 2000
    status = ProfileSessionStatus.model_validate(
        {
            "phase": "Failed",
            "target": long,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                    "reason": "UploadFailed",
                    "message": long,
                }
            ],
            "ranks": {
                "expected": 1,
                "failed": [{"rank": 0, "pod": long, "reason": long}],
                "failedCount": 1,
            },
        }
    )
    wire = status.to_wire()
    assert len(wire["target"]) == TARGET_MAX_LENGTH
    assert len(wire["conditions"][0]["message"]) == CONDITION_MESSAGE_MAX_LENGTH
    assert len(wire["ranks"]["failed"][0]["reason"]) == FAILURE_REASON_MAX_LENGTH
    assert ProfileSessionStatus.model_validate(wire) == status
