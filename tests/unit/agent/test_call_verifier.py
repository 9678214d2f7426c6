"""The signed-call check on its own: the canonical form, and every reason a call is refused."""

from __future__ import annotations

import pytest
from stepscope_agent.call_auth import (
    CallRefused,
    CallVerifier,
    TrustedKeysError,
    parse_trusted_keys,
)
from stepscope_operator.agents.signing import AgentKeyring

from stepscope.api.agent import (
    CALL_SIGNATURE_CONTEXT,
    CLOCK_WINDOW_SECONDS,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TARGET_HEADER,
    TIMESTAMP_HEADER,
    canonical_call,
)

NOW = 1_800_000_000.0
UID = "5b0c6a1e-0000-4000-8000-000000000000"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def test_the_canonical_form_covers_every_field_once():
    form = canonical_call("post", "/v1/captures", b"{}", 1700, "ab" * 16, "team-a", "w-0", UID)
    assert form.decode().split("\n") == [
        CALL_SIGNATURE_CONTEXT,
        "POST",
        "/v1/captures",
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",  # sha256 of {}
        "1700",
        "ab" * 16,
        "team-a",
        "w-0",
        UID,
    ]
    fields = ("GET", "/v1/status", b"", 1700, "ab" * 16, "team-a", "w-0", UID)
    changes = ("PUT", "/v1/x", b"x", 1701, "cd" * 16, "team-b", "w-1", "another-uid")
    for index, changed in enumerate(changes):
        other = list(fields)
        other[index] = changed
        assert canonical_call(*other) != canonical_call(*fields), f"field {index} not covered"


def test_a_newline_in_a_field_is_refused():
    # "a\nb" as the namespace and "c" as the pod must not sign the same bytes as "a" + "b\nc".
    with pytest.raises(ValueError, match="newline"):
        canonical_call("GET", "/", b"", 1, "n", "team-a\nw-0", "x", UID)


def verifier(keyring: AgentKeyring, clock: Clock, **kwargs) -> CallVerifier:
    return CallVerifier(
        parse_trusted_keys(keyring.trusted_keys_text()), "team-a", "w-0", UID, clock, **kwargs
    )


def signed(keyring: AgentKeyring, clock: Clock, namespace="team-a", pod="w-0", uid=UID, body=b"{}"):
    signer = AgentKeyring(keyring.keys, clock=clock)
    return signer.signed_headers("POST", "/v1/captures", body, namespace, pod, uid)


def test_a_call_signed_for_this_pod_is_accepted_once():
    keyring, clock = AgentKeyring.generate(), Clock()
    check = verifier(keyring, clock)
    headers = signed(keyring, clock)
    check.verify("POST", "/v1/captures", b"{}", headers)
    with pytest.raises(CallRefused, match="already used"):
        check.verify("POST", "/v1/captures", b"{}", headers)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"namespace": "team-b"}, f"signed for 'team-b/w-0/{UID}', this agent is team-a/w-0/"),
        ({"pod": "w-1"}, f"signed for 'team-a/w-1/{UID}', this agent is team-a/w-0/"),
        # The pod this call was meant for is gone; this one has its name (and its address).
        ({"uid": "0ld-u1d"}, "signed for 'team-a/w-0/0ld-u1d', another pod of this name"),
    ],
)
def test_a_call_for_another_target_is_refused(change, says):
    keyring, clock = AgentKeyring.generate(), Clock()
    with pytest.raises(CallRefused, match=says):
        verifier(keyring, clock).verify(
            "POST", "/v1/captures", b"{}", signed(keyring, clock, **change)
        )


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/v1/captures", b"{}"),
        ("POST", "/v1/status", b"{}"),
        ("POST", "/v1/captures", b"[]"),
    ],
)
def test_a_changed_method_path_or_body_does_not_verify(method, path, body):
    keyring, clock = AgentKeyring.generate(), Clock()
    with pytest.raises(CallRefused, match="no signature verifies"):
        verifier(keyring, clock).verify(method, path, body, signed(keyring, clock))


def test_the_clock_window_is_enforced_both_ways():
    keyring, clock = AgentKeyring.generate(), Clock()
    check = verifier(keyring, clock)
    for offset in (-(CLOCK_WINDOW_SECONDS + 1), CLOCK_WINDOW_SECONDS + 1):
        headers = signed(keyring, clock)
        clock.now = NOW + offset
        with pytest.raises(CallRefused, match="outside the 60s window"):
            check.verify("POST", "/v1/captures", b"{}", headers)
        clock.now = NOW
    edge = signed(keyring, clock)
    clock.now = NOW + CLOCK_WINDOW_SECONDS
    check.verify("POST", "/v1/captures", b"{}", edge)


def test_any_trusted_key_of_several_signatures_is_enough():
    old, new = AgentKeyring.generate(), AgentKeyring.generate()
    both = AgentKeyring(old.keys + new.keys)
    clock = Clock()
    for trusted in (old, new, both):
        verifier(trusted, clock).verify("POST", "/v1/captures", b"{}", signed(both, clock))
    with pytest.raises(CallRefused, match="no signature verifies"):
        verifier(old, clock).verify("POST", "/v1/captures", b"{}", signed(new, clock))


@pytest.mark.parametrize(
    ("header", "value", "says"),
    [
        (NONCE_HEADER, "../etc", "32 lower-case hex"),
        (TIMESTAMP_HEADER, "1e9", "whole seconds"),
        (SIGNATURE_HEADER, ",".join(["k=AA=="] * 5), "more than 4 signatures"),
        (SIGNATURE_HEADER, "", "no X-Stepscope-Signature header"),
    ],
)
def test_malformed_headers_are_refused_with_the_reason(header, value, says):
    keyring, clock = AgentKeyring.generate(), Clock()
    headers = {**signed(keyring, clock), header: value}
    with pytest.raises(CallRefused, match=says):
        verifier(keyring, clock).verify("POST", "/v1/captures", b"{}", headers)


def test_nonce_memory_is_bounded_and_forgets_after_the_window():
    keyring, clock = AgentKeyring.generate(), Clock()
    check = verifier(keyring, clock, max_nonces=3)
    for _ in range(3):
        check.verify("POST", "/v1/captures", b"{}", signed(keyring, clock))
    with pytest.raises(CallRefused, match="more than 3 calls") as refused:
        check.verify("POST", "/v1/captures", b"{}", signed(keyring, clock))
    assert refused.value.busy
    clock.now = NOW + CLOCK_WINDOW_SECONDS + 1
    check.verify("POST", "/v1/captures", b"{}", signed(keyring, clock))
    assert len(check._nonces) == 1


@pytest.mark.parametrize("text", ["", " , ", "not-base64!", "AAAA"])
def test_unusable_trusted_keys_name_the_variable(text):
    with pytest.raises(TrustedKeysError, match="STEPSCOPE_AGENT_TRUSTED_KEYS"):
        parse_trusted_keys(text)


def test_the_headers_are_checked_before_the_body_exists():
    keyring, clock = AgentKeyring.generate(), Clock()
    check = verifier(keyring, clock)
    headers = signed(keyring, clock, body=b'{"big": "body"}')
    call = check.check_headers("POST", "/v1/captures", headers)
    with pytest.raises(CallRefused, match="no signature verifies"):
        check.check_body(call, b'{"other": "body"}')
    check.check_body(call, b'{"big": "body"}')
    # The nonce is remembered now, so its replay is refused from the headers alone.
    with pytest.raises(CallRefused, match="already used"):
        check.check_headers("POST", "/v1/captures", headers)


def test_a_signature_by_no_trusted_key_id_is_refused_from_the_headers():
    trusted, other, clock = AgentKeyring.generate(), AgentKeyring.generate(), Clock()
    with pytest.raises(CallRefused, match="none is by a key id it trusts"):
        verifier(trusted, clock).check_headers("POST", "/v1/captures", signed(other, clock))


def test_a_call_signed_before_the_agent_started_is_refused_as_busy():
    """After a restart the nonce memory is empty; every call the previous process accepted is
    timestamped before this one started, so none of them passes again."""
    keyring, clock = AgentKeyring.generate(), Clock()
    recorded = signed(keyring, clock)
    clock.now = NOW + 3
    restarted = verifier(keyring, clock)
    assert restarted.started_at == NOW + 3
    with pytest.raises(CallRefused, match="before this agent started") as refused:
        restarted.verify("POST", "/v1/captures", b"{}", recorded)
    assert refused.value.busy
    restarted.verify("POST", "/v1/captures", b"{}", signed(keyring, clock))


def test_a_timestamp_of_other_digits_is_refused_not_crashed_on():
    keyring, clock = AgentKeyring.generate(), Clock()
    # "²" is a digit to str.isdigit and a byte of latin-1, in which HTTP headers are read.
    headers = {**signed(keyring, clock), TIMESTAMP_HEADER: "18²"}
    with pytest.raises(CallRefused, match="whole seconds"):
        verifier(keyring, clock).verify("POST", "/v1/captures", b"{}", headers)


def test_a_call_signed_for_another_uid_does_not_verify_under_this_pods_target():
    """A call signed for an earlier pod of this name, its target header rewritten to name this
    pod: the signature covers the UID, so it does not verify."""
    keyring, clock = AgentKeyring.generate(), Clock()
    headers = {**signed(keyring, clock, uid="0ld-u1d"), TARGET_HEADER: f"team-a/w-0/{UID}"}
    with pytest.raises(CallRefused, match="no signature verifies"):
        verifier(keyring, clock).verify("POST", "/v1/captures", b"{}", headers)
