"""A real sidecar accepts only calls the operator signed for it (its namespace, name and UID),
once, and now; every reply names that pod, and the operator's client refuses a reply naming
another; it uploads only to its storage endpoint; and a rotation of the operator's keyring never
interrupts it."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest
from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError
from stepscope_operator.agents.signing import AgentKeyring
from stepscope_operator.settings import ENV, load_settings
from support.operator_helpers import AGENT_KEYRING

from stepscope.api.agent import (
    CAPTURES_PATH,
    CLOCK_WINDOW_SECONDS,
    SERVED_BY_HEADER,
    SIGNATURE_HEADER,
    STATUS_PATH,
    TARGET_HEADER,
    capture_path,
)

pytestmark = pytest.mark.integration


def test_a_call_signed_for_another_namespace_or_pod_is_refused(start_sidecar):
    pod = start_sidecar("worker-0", namespace="team-a")
    assert pod.call("GET", STATUS_PATH)[0] == 200

    code, body = pod.call("GET", STATUS_PATH, namespace="team-b")
    assert code == 401
    assert f"signed for 'team-b/worker-0/{pod.uid}'" in body["error"]
    code, body = pod.call("GET", STATUS_PATH, pod="worker-1")
    assert code == 401
    assert f"signed for 'team-a/worker-1/{pod.uid}'" in body["error"]
    # Claiming this pod in the header does not help a signature made for team-b's pod.
    code, body = pod.call(
        "GET",
        STATUS_PATH,
        namespace="team-b",
        headers={TARGET_HEADER: f"team-a/worker-0/{pod.uid}"},
    )
    assert code == 401
    assert "no signature verifies" in body["error"]


def test_a_call_signed_for_another_pod_of_the_same_name_is_refused(start_sidecar):
    """The pod was deleted and one of the same name (another UID) got its address: a call
    signed for the first, with its namespace's upload grants, is not the second's to take."""
    pod = start_sidecar("worker-0", namespace="team-a")
    earlier = str(uuid.uuid4())
    code, body = pod.call("GET", STATUS_PATH, pod_uid=earlier)
    assert code == 401
    assert f"signed for 'team-a/worker-0/{earlier}', another pod of this name" in body["error"]
    assert f"this agent is team-a/worker-0/{pod.uid}" in body["error"]
    # Claiming this pod's UID in the header does not help a signature made for the other.
    code, body = pod.call(
        "GET", STATUS_PATH, pod_uid=earlier, headers={TARGET_HEADER: f"team-a/worker-0/{pod.uid}"}
    )
    assert code == 401
    assert "no signature verifies" in body["error"]


def test_the_operator_refuses_a_reply_from_another_pod_than_it_called(start_sidecar):
    """Every reply names the pod it comes from; the operator's client refuses one from any
    other pod than the one it called (a stale address), before reading its body."""
    pod = start_sidecar("worker-0", namespace="team-a")
    code, _ = pod.call("GET", STATUS_PATH)
    assert code == 200

    async def status(namespace: str, name: str, uid: str):
        async with aiohttp.ClientSession() as http:
            client = AgentClient(http, AGENT_KEYRING, namespace, pod.port, 5)
            return await client.status(AgentAddress(name, "127.0.0.1", uid))

    assert asyncio.run(status("team-a", "worker-0", pod.uid)).pod == "worker-0"
    for namespace, name, uid in (
        ("team-a", "worker-0", str(uuid.uuid4())),
        ("team-b", "worker-0", pod.uid),
        ("team-a", "worker-9", pod.uid),
    ):
        with pytest.raises(AgentError) as refused:
            asyncio.run(status(namespace, name, uid))
        message = str(refused.value)
        assert f"comes from 'team-a/worker-0/{pod.uid}'" in message, message
        assert f"not '{namespace}/{name}/{uid}'" in message and SERVED_BY_HEADER in message
        assert refused.value.status is None and not refused.value.transient


def test_unsigned_calls_and_other_keys_are_refused(start_sidecar):
    pod = start_sidecar()
    code, body = pod.call("GET", STATUS_PATH, headers={SIGNATURE_HEADER: ""})
    assert code == 401
    assert SIGNATURE_HEADER in body["error"]
    code, body = pod.call("GET", STATUS_PATH, keyring=AgentKeyring.generate())
    assert code == 401
    assert "no signature verifies" in body["error"]


def test_a_replayed_call_is_refused(start_sidecar, grants):
    pod = start_sidecar()
    request = grants.request("replay", 10, 2, [0])
    headers = AGENT_KEYRING.signed_headers(
        "DELETE", capture_path("replay"), b"", pod.namespace, pod.pod, pod.uid
    )
    assert pod.call("POST", CAPTURES_PATH, request)[0] == 201
    assert pod.call("DELETE", capture_path("replay"), headers=headers)[0] == 200
    code, body = pod.call("DELETE", capture_path("replay"), headers=headers)
    assert code == 401
    assert "already used" in body["error"]


@pytest.mark.parametrize("skew", [-(CLOCK_WINDOW_SECONDS + 30), CLOCK_WINDOW_SECONDS + 30])
def test_a_call_outside_the_clock_window_is_refused(start_sidecar, skew):
    pod = start_sidecar()
    shifted = AgentKeyring(AGENT_KEYRING.keys, clock=lambda: AGENT_KEYRING.clock() + skew)
    code, body = pod.call("GET", STATUS_PATH, keyring=shifted)
    assert code == 401
    assert f"outside the {CLOCK_WINDOW_SECONDS}s window" in body["error"]


def test_a_grant_on_a_foreign_host_is_refused_at_arm_time(start_sidecar, grants, local_cluster):
    pod = start_sidecar()
    foreign = grants.request("exfiltrate", 10, 2, [0], endpoint="http://attacker.example:80")
    code, body = pod.call("POST", CAPTURES_PATH, foreign)
    assert code == 422
    assert "http://attacker.example:80" in body["error"]
    assert local_cluster.s3_endpoint.removeprefix("http://") in body["error"]
    assert pod.call("GET", capture_path("exfiltrate"))[0] == 404  # nothing was armed


def test_a_running_agent_keeps_accepting_calls_across_a_key_rotation(
    start_sidecar, grants, tmp_path
):
    """The procedure of docs/install.md: add the new key, wait for the old pods, remove the
    old key; the operator reads its key directory on every use."""
    old, new = AgentKeyring.generate(), AgentKeyring.generate()
    keys_dir = tmp_path / "signing-keys"
    old_files = old.write(keys_dir)
    settings = load_settings({ENV["agent_signing_keys_dir"]: str(keys_dir)})
    old_pod = start_sidecar("old-pod", trusted=old)

    async def calls(pod, capture_id: str | None = None) -> str:
        async with aiohttp.ClientSession() as http:
            client = AgentClient(http, settings.agent_keyring(), pod.namespace, pod.port, 5)
            agent = AgentAddress(pod.pod, "127.0.0.1", pod.uid)
            if capture_id is None:
                return (await client.status(agent)).pod
            return (await client.capture(agent, capture_id)).state

    request = grants.request("across", 100_000, 2, [0])
    assert old_pod.call("POST", CAPTURES_PATH, request, keyring=old)[0] == 201
    assert asyncio.run(calls(old_pod, "across")) == "armed"

    # 1. The new key joins the Secret: the old pod still verifies the old key's signature,
    #    and a pod created now trusts both keys (the webhook reads the same directory).
    new.write(keys_dir)
    assert len(settings.agent_keyring().keys) == 2
    assert asyncio.run(calls(old_pod, "across")) == "armed"
    both_pod = start_sidecar("both-pod", trusted=settings.agent_keyring())
    assert asyncio.run(calls(both_pod)) == "both-pod"

    # 2. Once the old pods are gone the old key is removed; pods trusting the new key go on.
    old_pod.stop()
    for path in old_files:
        path.unlink()
    assert settings.agent_keyring().public_keys() == new.public_keys()
    new_pod = start_sidecar("new-pod", trusted=new)
    assert asyncio.run(calls(new_pod)) == "new-pod"
    assert asyncio.run(calls(both_pod)) == "both-pod"


def test_an_old_pod_refuses_the_new_key_alone(start_sidecar):
    """Why the rotation waits for the old pods before removing the old key."""
    old, new = AgentKeyring.generate(), AgentKeyring.generate()
    pod = start_sidecar(trusted=old)

    async def status() -> None:
        async with aiohttp.ClientSession() as http:
            client = AgentClient(http, new, pod.namespace, pod.port, 5)
            await client.status(AgentAddress(pod.pod, "127.0.0.1", pod.uid))

    with pytest.raises(AgentError, match="401"):
        asyncio.run(status())
