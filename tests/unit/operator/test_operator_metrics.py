"""A finished session's numbers become per-target gauges, in base units, and what the
session did not measure is never written as zero."""

import asyncio
import uuid

from prometheus_client import REGISTRY
from stepscope_operator.metrics import AGENT_CALLS, record_finished_session

from stepscope.api.session import TargetSpec
from stepscope.api.session_status import ProfileSessionStatus


def _status(**fields):
    return ProfileSessionStatus.model_validate({"phase": "Succeeded", **fields})


def test_step_time_breakdown_and_bytes_of_a_finished_session():
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    status = _status(
        summary={
            "stepTimeMs": {"p50": 412.0, "p95": 430.5},
            "breakdown": {
                "compute": 51.2,
                "exposedCommunication": 31.0,
                "dataLoading": 2.1,
                "hostOverhead": 4.0,
                "idle": 11.7,
            },
        },
        artifacts={"bytes": 81234567},
    )
    llama = TargetSpec.model_validate({"pytorchJob": "llama"})
    record_finished_session(namespace, "llama-1", llama, status)
    record_finished_session(namespace, "llama-2", llama, status)

    def value(name, **labels):
        return REGISTRY.get_sample_value(name, {"namespace": namespace, **labels})

    target = {"target": "pytorchjob/llama"}
    assert value("stepscope_session_step_time_seconds", quantile="0.5", **target) == 0.412
    assert value("stepscope_session_step_time_seconds", quantile="0.95", **target) == 0.4305
    assert value("stepscope_session_breakdown_ratio", category="compute", **target) == 0.512
    assert (
        value("stepscope_session_breakdown_ratio", category="exposed_communication", **target)
        == 0.31
    )
    assert value("stepscope_capture_bytes_total") == 2 * 81234567


def test_a_session_without_a_summary_sets_no_gauge():
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    gone = TargetSpec.model_validate({"pytorchJob": "gone"})
    record_finished_session(namespace, "gone-1", gone, _status(phase="Failed"))
    labels = {"namespace": namespace, "target": "pytorchjob/gone", "quantile": "0.5"}
    assert REGISTRY.get_sample_value("stepscope_session_step_time_seconds", labels) is None
    assert (
        REGISTRY.get_sample_value("stepscope_capture_bytes_total", {"namespace": namespace}) is None
    )


def test_an_agent_call_that_fails_after_its_retries_is_counted_by_call():
    from stepscope.api.hang_dump import HangDumpRequest

    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    asyncio.run(_refused_calls(namespace, lambda client, agent: client.status(agent)))
    dump = HangDumpRequest(request_id="hang-1", timeout_seconds=1.0, grants={})
    asyncio.run(_refused_calls(namespace, lambda client, agent: client.hang_dump(agent, dump)))

    def failures(call: str) -> float | None:
        labels = {"namespace": namespace, "call": call}
        return REGISTRY.get_sample_value("stepscope_agent_call_failures_total", labels)

    assert failures("status") == 2
    # A hang dump is its own call, not an arm (both are POSTs).
    assert failures("hang-dump") == 2 and failures("arm") is None
    assert set(AGENT_CALLS) >= {"status", "hang-dump"}


async def _refused_calls(namespace: str, call) -> None:
    import aiohttp
    from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError
    from stepscope_operator.agents.fanout import FanOut, RetryPolicy
    from stepscope_operator.agents.signing import AgentKeyring
    from support import free_port

    retries = RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.02)
    async with aiohttp.ClientSession() as http:
        client = AgentClient(
            http,
            AgentKeyring.generate(),
            namespace,
            free_port(),
            timeout_s=2.0,
            fan_out=FanOut(max_in_flight=4, retry=retries),
        )
        # Nothing listens on 127.0.0.78: the connection is refused, as by a crashed sidecar.
        agent = AgentAddress("trainer-0", "127.0.0.78", "uid-0")
        for _ in range(2):
            try:
                await call(client, agent)
            except AgentError:
                pass
            else:
                raise AssertionError("a refused call must raise AgentError")
