"""The agent wire models: camelCase on the wire, errors that name the field, state folding."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from stepscope_agent import messages

from stepscope.api.agent import (
    AgentStatus,
    CaptureFailure,
    CaptureRequest,
    CaptureState,
    FailureCode,
    RankCaptureStatus,
    overall_state,
)

GRANT = {
    "key": "p/rank-0/trace.json.gz",
    "expiresAt": "2030-01-01T00:00:00Z",
    "putUrl": "http://s3/x",
}


def request(**changes) -> dict:
    body = {
        "captureId": "llama-ft-1-w0",
        "startStep": 1200,
        "steps": 5,
        "tier": "ops",
        "deadline": "2030-01-01T00:00:00Z",
        "maxBytesPerRank": 1 << 20,
        "grants": [
            {"rank": 0, "trace": GRANT, "counters": GRANT, "summary": GRANT, "steps": GRANT}
        ],
    }
    body.update(changes)
    return body


def test_request_round_trips_in_camel_case():
    parsed = CaptureRequest.model_validate(request())
    assert parsed.end_step == 1204
    assert parsed.warmup_steps == 1
    wire = parsed.to_wire()
    assert wire["captureId"] == "llama-ft-1-w0"
    assert wire["grants"][0]["trace"]["putUrl"] == "http://s3/x"
    assert CaptureRequest.model_validate(wire) == parsed


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"steps": 1001}, "steps"),
        ({"captureId": "Not_DNS"}, "captureId"),
        ({"tier": "everything"}, "tier"),
        ({"deadline": "2030-01-01T00:00:00"}, "deadline"),  # no time zone
        ({"startStp": 3}, "startStp"),  # a typo is refused, not ignored
    ],
)
def test_invalid_requests_name_the_field(changes, field):
    with pytest.raises(ValidationError) as caught:
        CaptureRequest.model_validate(request(**changes))
    assert field in str(caught.value)


def test_a_grant_needs_exactly_one_way_to_upload():
    both = {
        **GRANT,
        "multipart": {
            "uploadId": "u",
            "partSizeBytes": 5 << 20,
            "partUrls": ["a"],
            "completeUrl": "c",
        },
    }
    bad = request(
        grants=[{"rank": 0, "trace": both, "counters": GRANT, "summary": GRANT, "steps": GRANT}]
    )
    with pytest.raises(ValidationError, match="exactly one of putUrl, multipart or post"):
        CaptureRequest.model_validate(bad)


def test_grants_are_one_set_per_rank():
    grant_set = {"rank": 3, "trace": GRANT, "counters": GRANT, "summary": GRANT, "steps": GRANT}
    with pytest.raises(ValidationError, match=r"rank\(s\) \[3\] more than once"):
        CaptureRequest.model_validate(request(grants=[grant_set, grant_set]))


def test_trace_ranks_and_steps_tier_decide_who_takes_a_trace():
    only_zero = CaptureRequest.model_validate(request(traceRanks=[0]))
    assert only_zero.takes_trace(0) and not only_zero.takes_trace(1)
    assert not CaptureRequest.model_validate(request(tier="steps")).takes_trace(0)


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (["done", "done"], "done"),
        (["failed", "failed"], "failed"),
        (["done", "failed"], "failed"),
        (["done", "uploading"], "uploading"),
        (["capturing", "armed"], "armed"),
        (["done", "not_reached"], "not_reached"),
        ([], "armed"),
    ],
)
def test_overall_state_is_the_least_advanced(states, expected):
    assert overall_state([CaptureState(s) for s in states]) == CaptureState(expected)


def test_status_serialises_with_api_version():
    status = AgentStatus(pod="p", agent_time=1.0, agent_version="0.1.0")
    assert status.to_wire()["apiVersion"] == "v1"
    assert status.to_wire()["gpuPresent"] is False


@pytest.mark.parametrize("code", list(FailureCode))
def test_every_failure_code_round_trips_on_both_wires(code):
    failure = CaptureFailure(code=code, message=f"{code} happened", reached_step=7, start_step=5)
    status = RankCaptureStatus(rank=0, state=CaptureState.FAILED, failure=failure)
    wire = status.to_wire()
    assert wire["failure"] == {
        "code": code.value,
        "message": f"{code} happened",
        "reachedStep": 7,
        "startStep": 5,
    }
    assert RankCaptureStatus.model_validate(wire).failure == failure
    # The trainer reports the same codes over the socket.
    sent = messages.WindowFailed(
        capture_id="c", code=code, message=failure.message, reached_step=7, start_step=5
    )
    assert messages.decode(messages.encode(sent)).code is code


def test_an_unknown_failure_code_is_refused_naming_the_field():
    with pytest.raises(ValidationError) as caught:
        CaptureFailure.model_validate({"code": "gremlins", "message": "m"})
    assert "code" in str(caught.value)


def test_failure_codes_are_unique_snake_case_words():
    values = [code.value for code in FailureCode]
    assert len(set(values)) == len(values)
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", value) for value in values), values
