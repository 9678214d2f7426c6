"""Diagnose a stuck job: ask every agent for dumps, attribute, store the report, say why.

Each agent gets one signed ``POST /v1/hang-dumps`` (the operator's fan-out bounds how many
are in flight) with a size-bound upload grant per rank for its full dump: the full dumps go
from the pods to storage, and the operator receives only the digests it attributes with
(stepscope/api/hang_dump.py, validated and bounded by the agent client). An agent that does
not answer leaves its ranks unknown; attribution names them as suspects when the others
wait for them, with the placement the operator already knows. So does a pod that is no longer
the one resolved (`targets.pod_binding`): it is not asked, and gets no grant.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from stepscope.api.hang_dump import MAX_DUMP_BYTES, HangDumpRequest, PodHangDumps, RankDump
from stepscope.api.hang_status import MAX_HANG_RANKS, HangDiagnosis, HangRank
from stepscope.hang.attribution import HangVerdict, Placement, RankSide, attribute_hang
from stepscope.hang.detection import StallJudgement
from stepscope.hang.report import render_hang_report
from stepscope.storage import RankArtifact, SessionArtifact, rank_key, s3_uri, session_key
from stepscope_operator.agents.client import AgentClient, AgentError
from stepscope_operator.storage.buckets import Buckets
from stepscope_operator.storage.grant_ledger import GrantLedger, GrantUse
from stepscope_operator.storage.grants import post_grant
from stepscope_operator.targets.pod_binding import PodBinding
from stepscope_operator.targets.resolving import RankTarget
from stepscope_operator.threads import computed, in_thread

# A stored full dump may be at most this large; the agent's own bound is half of it
# (JSON indentation adds the rest).
MAX_STORED_DUMP_BYTES = 2 * MAX_DUMP_BYTES
GRANT_SECONDS = 600


@dataclass
class DumpRound:
    """The answers of one round of dump requests."""

    dumps: list[RankDump]
    notes: list[str]
    stored: list[str]


def dump_request(
    buckets: Buckets,
    prefix: str,
    request_id: str,
    targets: list[RankTarget],
    pod: str,
    timeout_s: float,
    now: datetime,
) -> HangDumpRequest:
    """The request for one pod: a POST grant for each of its ranks' full dumps."""
    grants = {
        t.rank: post_grant(
            buckets,
            rank_key(prefix, t.rank, RankArtifact.HANG_DUMP),
            GRANT_SECONDS,
            now,
            MAX_STORED_DUMP_BYTES,
            "application/json",
        )
        for t in targets
        if t.pod == pod
    }
    return HangDumpRequest(request_id=request_id, timeout_seconds=timeout_s, grants=grants)


async def collect_dumps(
    client: AgentClient,
    buckets: Buckets,
    ledger: GrantLedger,
    prefix: str,
    request_id: str,
    targets: list[RankTarget],
    binding: PodBinding,
    timeout_s: float,
    now: datetime,
) -> DumpRound:
    """Ask every pod `binding` lets be called, at its address this round; the lost ones are
    notes."""
    pods = sorted(binding.addresses)

    def sign_requests() -> dict[str, HangDumpRequest]:
        # Recorded before any grant is signed: a clean-up waits for the dumps' uploads too.
        ledger.record(GrantUse.HANG_DUMP, now + timedelta(seconds=GRANT_SECONDS))
        return {
            pod: dump_request(buckets, prefix, request_id, targets, pod, timeout_s, now)
            for pod in pods
        }

    requests = await in_thread(client.namespace, sign_requests)

    async def ask(pod: str) -> PodHangDumps | str:
        try:
            return await client.hang_dump(binding.addresses[pod], requests[pod])
        except AgentError as error:
            return str(error)

    answers = await asyncio.gather(*(ask(pod) for pod in pods))
    round_ = DumpRound([], list(binding.reasons().values()), [])
    expected = {t.rank: t.pod for t in targets}
    for pod, answer in zip(pods, answers, strict=True):
        if isinstance(answer, str):
            round_.notes.append(answer)
            continue
        # A pod speaks only for the ranks that run in it.
        round_.dumps += [d for d in answer.ranks if expected.get(d.rank) == pod]
        round_.notes += answer.notes
        round_.stored += answer.stored
    return round_


def placement_of(targets: list[RankTarget]) -> dict[int, Placement]:
    return {t.rank: Placement(pod=t.pod, node=t.node) for t in targets}


def _ranks(side: RankSide | None) -> list[HangRank]:
    if side is None:
        return []
    return [
        HangRank(
            rank=rank,
            pod=side.pod if i == 0 else None,
            node=side.node if i == 0 else None,
            stuck_at=side.stuck_at if i == 0 else None,
            entered=side.entered,
        )
        for i, rank in enumerate(side.ranks[:MAX_HANG_RANKS])
    ]


def diagnosis_from_verdict(
    verdict: HangVerdict,
    judgement: StallJudgement,
    detected_at: datetime,
    report_uri: str | None,
) -> HangDiagnosis:
    """The status field from attribution's verdict and the stall that started it."""
    others = "; ".join(verdict.details) or None
    if verdict.others is not None and verdict.others.entered and not others:
        others = f"{verdict.others.name()} entered {verdict.others.entered}"
    return HangDiagnosis(
        kind=verdict.kind,
        message=verdict.headline,
        process_group=verdict.group,
        sequence_id=verdict.seq,
        collective=verdict.op,
        ranks=_ranks(verdict.culprits),
        others=others,
        stalled_seconds=round(judgement.stalled_s or 0.0, 1),
        threshold_seconds=round(judgement.threshold_s, 1),
        last_step=judgement.last_step,
        detected_at=detected_at,
        report=report_uri,
    )


def store_report(
    buckets: Buckets, prefix: str, verdict: HangVerdict, round_: DumpRound
) -> tuple[str, str]:
    """Write hang-report.txt next to the dumps; (its key, its text)."""
    text = render_hang_report(verdict, round_.dumps)
    if round_.notes:
        text += "\nnotes:\n" + "".join(f"  {note}\n" for note in round_.notes[:32])
    key = session_key(prefix, SessionArtifact.HANG_REPORT)
    buckets.put_bytes(key, text.encode(), "text/plain; charset=utf-8")
    return key, text


async def diagnose(
    client: AgentClient,
    buckets: Buckets,
    ledger: GrantLedger,
    prefix: str,
    request_id: str,
    targets: list[RankTarget],
    binding: PodBinding,
    judgement: StallJudgement,
    timeout_s: float,
    now: datetime,
) -> tuple[HangDiagnosis, DumpRound]:
    """Dump, attribute and store; the diagnosis for status."""
    round_ = await collect_dumps(
        client, buckets, ledger, prefix, request_id, targets, binding, timeout_s, now
    )
    # The dumps are the tenant's: attribution is linear in them and they are bounded by the wire
    # model (ranks, groups, entries per rank), yet at those bounds it takes seconds of CPU, so it
    # runs on the compute thread, where the event loop still gets the interpreter every switch
    # interval, instead of holding every other session's calls for that long.
    verdict = await computed(client.namespace, attribute_hang, round_.dumps, placement_of(targets))
    key, _ = await in_thread(client.namespace, store_report, buckets, prefix, verdict, round_)
    return diagnosis_from_verdict(verdict, judgement, now, s3_uri(buckets.bucket, key)), round_


def request_id_for(uid: str, now: datetime) -> str:
    """A request id from the session and the minute: a retried call asks the same."""
    stamp = (now - timedelta(seconds=now.second)).strftime("%Y%m%d%H%M")
    return f"hang-{uid[:8]}-{stamp}".lower()
