"""An agent whose answer breaks the wire contract makes its pod's ranks missing, naming the
field, instead of stopping the session."""

import asyncio

from stepscope_operator.agents.client import AgentAddress
from stepscope_operator.sessions.following import observe_pod

from stepscope.api.agent import CaptureStatus


class AnsweringAgent:
    """Answers GET /v1/captures/{id} with a fixed body, parsed as the real client parses it."""

    def __init__(self, body: dict) -> None:
        self.body = body

    async def capture(self, agent: AgentAddress, capture_id: str) -> CaptureStatus:
        return CaptureStatus.model_validate(self.body)


POD = AgentAddress("pod-0", "127.0.0.1", "uid-0")
BODY = {
    "captureId": "c",
    "state": "done",
    "startStep": 10,
    "endStep": 14,
    "ranks": [{"rank": 0, "state": "done", "summary": {"kind": "histogram"}}],
}


def test_a_summary_of_no_known_kind_names_the_field():
    observed = asyncio.run(observe_pod(AnsweringAgent(BODY), POD, "c"))
    assert observed.capture is None and not observed.settled
    assert "the agent in pod pod-0 broke the wire contract" in observed.error
    assert "ranks.0.summary" in observed.error


def test_a_valid_answer_is_observed_as_it_is():
    good = {**BODY, "ranks": [{"rank": 0, "state": "done"}]}
    observed = asyncio.run(observe_pod(AnsweringAgent(good), POD, "c"))
    assert observed.error is None and observed.settled
