"""Agent replies are bounded by bytes, by JSON values and by the counts the wire models
declare, and parsed off the event loop, against a real HTTP server.

A real aiohttp server on loopback plays a hostile agent; each reply that is too long, too
deep, too many values, too many items for its field, not JSON or not the wire model must
become an AgentError naming the pod, the call and the limit, quickly and in bounded
memory, while the event loop keeps running. Honest replies, from the recorded scenarios
and at the analysis's own caps, must still come through.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import tracemalloc
from pathlib import Path
from typing import get_type_hints

import aiohttp
import pytest
from aiohttp import web
from stepscope_operator.agents import replies
from stepscope_operator.agents.client import AgentAddress, AgentClient, AgentError
from stepscope_operator.agents.replies import CAPTURE_REPLY, REPLY_LIMITS, STATUS_REPLY
from stepscope_operator.agents.signing import AgentKeyring
from support import free_port
from support.fake_agents import answering_as_called

from stepscope.analysis.model.counter_stats import CounterSeries, CounterStats, DeviceCounters
from stepscope.analysis.model.rank_summary import (
    MAX_COLLECTIVE_RECORDS,
    MAX_STEP_RECORDS,
    TOP_N,
    Breakdown,
    CollectiveRecord,
    CollectiveStat,
    DeviceSplit,
    OpStat,
    RankSummary,
    StepRecord,
)
from stepscope.analysis.rank.summary import summarize_rank
from stepscope.api import agent as wire

POD = "llama-ft-worker-3"
AGENT = AgentAddress(POD, "127.0.0.1", "8d1e5a4c-0000-4000-8000-000000000003")
CAPTURE_ID = "c"
GOOD_STATUS = {"pod": POD, "agentTime": 1.0, "agentVersion": "test"}
SCENARIOS = Path(__file__).parents[2] / "data" / "scenarios"
# What "quickly" and "bounded" mean for a refused reply, on a shared 2-core runner.
REFUSAL_PEAK_BYTES = 64 * 1024 * 1024
# The longest the event loop may go without running while a reply is parsed.
MAX_LOOP_GAP_S = 0.2


def _capture_text(ranks: bytes) -> bytes:
    return b'{"captureId":"c","state":"done","startStep":0,"endStep":9,"ranks":[' + ranks + b"]}"


def _filling(item: bytes, limit: int) -> bytes:
    """As many `item`s as fit, comma-separated, in a capture reply of at most `limit`."""
    count = (limit - len(_capture_text(b""))) // (len(item) + 1)
    return _capture_text(b",".join([item] * count))


# 1.5 million ranks of one key each, and 5.6 million empty lists, inside the byte limit.
MANY_RANKS = _filling(b'{"rank":0}', CAPTURE_REPLY.max_bytes)
MANY_LISTS = _filling(b"[]", CAPTURE_REPLY.max_bytes)
# Few enough values to pass the text's check, too many ranks for CaptureStatus.ranks.
RANKS_PAST_THE_MODEL = _capture_text(b",".join([b'{"rank":0}'] * 100_000))


def _streamed(body: bytes):
    """A handler that sends `body` in chunks, waiting for the socket, as an agent would."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        view = memoryview(body)
        try:
            for start in range(0, len(body), 256 * 1024):
                await response.write(view[start : start + 256 * 1024])
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass  # the client gave up, as it should
        return response

    return handler


REPLIES = {
    "too long": lambda request: web.Response(body=b" " * (STATUS_REPLY.max_bytes + 1)),
    "too long, streamed": _streamed(b" " * (STATUS_REPLY.max_bytes * 4)),
    "too deep": lambda request: web.Response(body=b"[" * 100_000 + b"]" * 100_000),
    "not json": lambda request: web.Response(text="<html>oops</html>"),
    "wrong shape": lambda request: web.json_response({"pod": ["a"], "agentTime": "soon"}),
    "good": lambda request: web.json_response(GOOD_STATUS),
}


async def _ask(reply, call: str = "status", during=None):
    """What the client makes of `reply` (a handler) to `call`; `during`, if given, is a
    coroutine run beside the call (a ticker)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        answer = reply(request)
        return await answer if asyncio.iscoroutine(answer) else answer

    app = answering_as_called(web.Application())
    app.router.add_route("*", "/{path:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:
            client = AgentClient(session, AgentKeyring.generate(), "ns", port, timeout_s=60)
            asked = client.status(AGENT) if call == "status" else client.capture(AGENT, CAPTURE_ID)
            if during is None:
                return await asked
            beside = asyncio.create_task(during())
            try:
                return await asked
            finally:
                beside.cancel()
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("too long", "longer than 262,144 bytes (STATUS_REPLY.max_bytes)"),
        ("too long, streamed", "longer than 262,144 bytes (STATUS_REPLY.max_bytes)"),
        ("too deep", "MAX_NESTING_DEPTH"),
        ("not json", "not usable JSON"),
        ("wrong shape", "not a valid AgentStatus ("),
    ],
)
def test_bad_replies_are_agent_errors_naming_pod_and_limit(case, says):
    started = time.monotonic()
    with pytest.raises(AgentError) as caught:
        asyncio.run(_ask(REPLIES[case]))
    assert caught.value.pod == POD
    assert f"agent in pod {POD}: GET {wire.STATUS_PATH}" in str(caught.value)
    assert says in str(caught.value)
    assert time.monotonic() - started < 20


def test_a_good_reply_still_comes_through():
    status = asyncio.run(_ask(REPLIES["good"]))
    assert status.pod == POD and status.agent_version == "test"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (MANY_RANKS, "JSON values (limit CAPTURE_REPLY.max_values)"),
        (MANY_LISTS, "JSON values (limit CAPTURE_REPLY.max_values)"),
        (RANKS_PAST_THE_MODEL, "holds 100,000 items; CaptureStatus.ranks allows at most 64"),
    ],
    ids=["1.5M ranks", "5.6M lists", "100k ranks"],
)
def test_many_small_values_under_the_byte_limit_are_refused_naming_the_limit(body, says):
    """16 MiB of `{"rank":0}` took 1.6 GB and 17 s to validate; `[[],[],...]` 411 MiB.
    What refusing them costs is measured below, in memory and in event-loop time."""
    assert len(body) <= CAPTURE_REPLY.max_bytes
    with pytest.raises(AgentError) as caught:
        asyncio.run(_ask(_streamed(body), "capture"))
    assert says in str(caught.value)
    assert f"agent in pod {POD}: GET {wire.capture_path(CAPTURE_ID)}" in str(caught.value)


@pytest.mark.parametrize("body", [MANY_RANKS, MANY_LISTS], ids=["1.5M ranks", "5.6M lists"])
def test_refusing_a_reply_of_many_values_takes_bounded_memory(body):
    """What the client holds is the reply's bytes, not objects built from them."""
    tracemalloc.start()
    try:
        with pytest.raises(AgentError, match="JSON values"):
            asyncio.run(_ask(_streamed(body), "capture"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < REFUSAL_PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"


async def _max_gap_while(asking) -> float:
    """The most CPU this process spent between two runs of a ticker on the loop while
    `asking()` ran: how long something (a parse holding the interpreter, a callback) kept the
    loop from its other work. Counted in process CPU time, not wall time, so that the machine's
    other load, which stops the whole process for a while, is not mistaken for the loop being
    held (a shared two-core runner did that by 0.6 s)."""
    gaps = [0.0]

    async def ticker() -> None:
        last = time.process_time()
        while True:
            await asyncio.sleep(0.005)
            now = time.process_time()
            gaps.append(now - last)
            last = now

    await asking(ticker)
    return max(gaps)


@pytest.mark.parametrize("body", [MANY_RANKS, MANY_LISTS], ids=["1.5M ranks", "5.6M lists"])
def test_the_event_loop_runs_while_a_hostile_reply_is_refused(body):
    async def asking(ticker) -> None:
        with pytest.raises(AgentError):
            await _ask(_streamed(body), "capture", during=ticker)

    assert asyncio.run(_max_gap_while(asking)) < MAX_LOOP_GAP_S


def _largest_summary(rank: int, steps: int) -> RankSummary:
    """A rank's summary with `steps` step records and every other list at its cap, with
    values as long as real ones (microsecond timestamps of 2026, four decimals)."""
    clock = 1.79e15 + rank

    def split(total: float) -> Breakdown:
        parts = (0.61, 0.13, 0.07, 0.05, 0.04, 0.1)
        ms = [round(total * p, 4) for p in parts]
        return Breakdown(
            compute_ms=ms[0],
            comm_exposed_ms=ms[1],
            comm_overlapped_ms=ms[2],
            data_loading_ms=ms[3],
            host_overhead_ms=ms[4],
            idle_ms=ms[5],
            total_ms=total,
        )

    records = [
        StepRecord(
            step=1_000_000 + s,
            start_us=clock + s * 123_456.789,
            end_us=clock + (s + 1) * 123_456.789,
            duration_ms=123.4568,
            breakdown=split(123.4568),
        )
        for s in range(steps)
    ]
    collectives = [
        CollectiveRecord(
            name="all_reduce",
            seq=100_000 + c,
            group="0",
            group_desc="default_pg",
            group_size=4096,
            dtype="BFloat16",
            in_msg_nelems=134_217_728,
            out_msg_nelems=134_217_728,
            size_bytes=268_435_456,
            start_us=clock + c * 1000.5,
            end_us=clock + c * 1000.5 + 456.789,
            step=1_000_000 + c,
            source="nccl_kernel",
        )
        for c in range(MAX_COLLECTIVE_RECORDS)
    ]
    kernel = "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_" + "x" * 1900 + ">"
    return RankSummary(
        source=f"rank-{rank}/trace.json.gz",
        rank=rank,
        world_size=4096,
        backend="nccl",
        device_kind="cuda",
        device_names=["NVIDIA H100 80GB HBM3"],
        steps=records,
        breakdown=split(123.4568 * steps),
        gpu=[
            DeviceSplit(
                device=rank,
                window_start_us=clock,
                window_end_us=clock + 1e8,
                window_ms=100_000.0,
                compute_kernel_ms=61_000.1234,
                comm_kernel_ms=13_000.1234,
                memory_ms=7_000.1234,
                idle_ms=18_999.6298,
                kernel_count=12_345_678,
            )
        ],
        top_ops=[
            OpStat(name=f"aten::op_{i}", count=10**6, self_ms=1.5, total_ms=2.5)
            for i in range(TOP_N)
        ],
        top_kernels=[OpStat(name=kernel, count=10**6, self_ms=1.5, total_ms=2.5)] * TOP_N,
        collectives=collectives,
        collective_stats=[CollectiveStat(name="all_reduce", count=10**6, total_ms=1.0)],
        counters=CounterStats(
            devices=[
                DeviceCounters(
                    device=rank,
                    series=[
                        CounterSeries(
                            metric=f"metric_{m}",
                            samples=6000,
                            mean=1.5,
                            min=1.0,
                            max=2.0,
                            p50=1.5,
                            p95=1.9,
                        )
                        for m in range(13)
                    ],
                )
            ]
        ),
    )


def _capture_of(summaries: list[RankSummary]) -> wire.CaptureStatus:
    return wire.CaptureStatus(
        capture_id=CAPTURE_ID,
        state=wire.CaptureState.DONE,
        start_step=0,
        end_step=9,
        ranks=[
            wire.RankCaptureStatus(
                rank=s.rank,
                state=wire.CaptureState.DONE,
                artifact_keys=[f"ns/s/c/rank-{s.rank}/{a}.json" for a in wire.ARTIFACTS],
                summary=wire.TraceSummary(tier=wire.Tier.OPS, rank_summary=s),
            )
            for s in summaries
        ],
    )


def _json_values(value: object) -> int:
    """Values as the text's check counts them: containers plus the commas between items."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max(len(value) - 1, 0) + sum(map(_json_values, value))
    return 0


def test_an_honest_pod_of_eight_ranks_is_well_inside_the_capture_limits():
    """Eight ranks' summaries of a full window (MAX_WINDOW_STEPS steps, collectives at
    their cap) take under half of each limit."""
    capture = _capture_of([_largest_summary(r, wire.MAX_WINDOW_STEPS) for r in range(8)])
    text = capture.model_dump_json(by_alias=True).encode()
    assert len(text) < CAPTURE_REPLY.max_bytes / 2
    assert _json_values(capture.to_wire()) < CAPTURE_REPLY.max_values / 2


def test_eight_ranks_at_the_summary_caps_come_through_while_the_loop_runs():
    """The largest summaries the analysis makes (MAX_STEP_RECORDS steps) still fit, and
    parsing 15 MB of them never holds the event loop."""
    capture = _capture_of([_largest_summary(r, MAX_STEP_RECORDS) for r in range(8)])
    text = capture.model_dump_json(by_alias=True).encode()
    assert len(text) <= CAPTURE_REPLY.max_bytes
    got: list[wire.CaptureStatus] = []

    async def asking(ticker) -> None:
        got.append(await _ask(_streamed(text), "capture", during=ticker))

    gap = asyncio.run(_max_gap_while(asking))
    assert got[0] == capture
    assert gap < MAX_LOOP_GAP_S


def test_a_reply_that_parses_past_the_budget_is_given_up_on(monkeypatch):
    """The budget is what bounds a call's wait for its parse, whatever the reply holds."""
    monkeypatch.setattr(replies, "REPLY_PARSE_BUDGET_S", 0.001)
    capture = _capture_of([_largest_summary(r, wire.MAX_WINDOW_STEPS) for r in range(8)])
    text = capture.model_dump_json(by_alias=True).encode()
    with pytest.raises(AgentError, match=r"longer than 0\.001 s to parse .REPLY_PARSE_BUDGET_S"):
        asyncio.run(_ask(_streamed(text), "capture"))


def test_the_recorded_scenarios_summaries_come_through_as_they_are():
    summaries = [
        summarize_rank(trace, rank=rank)
        for rank, trace in enumerate(sorted(SCENARIOS.glob("*/rank-0.json.gz")))
    ]
    capture = _capture_of([s.model_copy(update={"rank": r}) for r, s in enumerate(summaries)])
    text = capture.model_dump_json(by_alias=True).encode()
    assert asyncio.run(_ask(_streamed(text), "capture")) == capture


def test_every_reply_the_client_parses_has_limits():
    """The client looks a reply's limits up by the model it returns; a new call whose
    model has no row fails here rather than at its first reply."""
    calls = [
        method
        for name, method in vars(AgentClient).items()
        if inspect.iscoroutinefunction(method) and not name.startswith("_")
    ]
    assert len(calls) >= 5
    for method in calls:
        assert get_type_hints(method)["return"] in REPLY_LIMITS, method.__name__
