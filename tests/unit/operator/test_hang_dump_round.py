"""A round of hang-dump requests goes only to the pods that are still the ones resolved: a pod
gone since gets no request and no upload grant, and the round's notes say why."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from stepscope_operator.agents.client import AgentAddress
from stepscope_operator.hang.diagnosis import collect_dumps
from stepscope_operator.storage.grant_ledger import grant_ledger
from stepscope_operator.targets.pod_binding import bind_pods
from stepscope_operator.targets.resolving import RankTarget
from support.memory_buckets import MemoryBuckets
from target_pods import pod

from stepscope.api.hang_dump import HangDumpRequest, PodHangDumps


class FormSigner:
    def sign(self, key: str, expires_in: int, fields: dict, conditions: list) -> dict:
        return {"url": "http://s3.example:9000/stepscope", "fields": {"key": key, **fields}}


class DumpingAgents:
    """Answers every hang-dump call with an empty dump, noting whom it was asked for."""

    namespace = "team-a"

    def __init__(self) -> None:
        self.asked: list[tuple[AgentAddress, HangDumpRequest]] = []

    async def hang_dump(self, agent: AgentAddress, request: HangDumpRequest) -> PodHangDumps:
        self.asked.append((agent, request))
        return PodHangDumps(pod=agent.pod)


def test_a_pod_gone_since_resolving_gets_no_dump_request_and_no_grant():
    targets = [
        RankTarget(
            rank=r, pod=f"w-{r}", namespace="team-a", pod_ip="10.0.0.9", pod_uid=f"uid-w-{r}"
        )
        for r in (0, 1)
    ]
    binding = bind_pods(targets, [pod("w-0", ip="10.0.0.7")])
    buckets = MemoryBuckets()
    buckets.post_signer = FormSigner()
    agents = DumpingAgents()
    ledger = grant_ledger(buckets, "stepscope", "uid-session")
    now = datetime.now(UTC)

    round_ = asyncio.run(
        collect_dumps(agents, buckets, ledger, "p/", "hang-1", targets, binding, 1.0, now)
    )
    ((agent, request),) = agents.asked
    assert agent == AgentAddress("w-0", "10.0.0.7", "uid-w-0")  # at its address now
    assert list(request.grants) == [0]
    assert round_.notes == [binding.lost["w-1"].message]
    assert round_.notes[0].startswith("pod w-1 is gone")
