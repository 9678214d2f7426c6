"""Baselines are read from the folder a session's namespace, name and uid name, never from
`status.artifacts.uri` (which whoever may patch the status chooses), and within a byte cap."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace

import pytest
from stepscope_operator.sessions import baselines
from stepscope_operator.sessions.baselines import (
    UnreadableSummary,
    compare_with_baseline,
    judge_session,
    load_summary,
    summary_key,
)
from stepscope_operator.sessions.view import SessionView
from stepscope_operator.settings import OperatorSettings
from support.memory_buckets import MemoryBuckets
from support.synthetic_jobs import job_summary

from stepscope.storage import SessionArtifact, session_key, session_prefix

# Another tenant's summary, which a session's forged status points at.
ELSEWHERE = session_key(
    session_prefix("stepscope", "team-b", "secret", "uid-b"), SessionArtifact.SUMMARY
)


def _session(name: str, *, uri: str | None = None, **spec) -> dict:
    status: dict = {"phase": "Succeeded"}
    if uri:
        status["artifacts"] = {"uri": uri}
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"target": {"pytorchJob": "llama"}, **spec},
        "status": status,
    }


class _Kube:
    def __init__(self, sessions: dict[str, dict]) -> None:
        self.sessions = sessions
        self.patched: list[dict] = []

    async def get_session(self, namespace: str, name: str) -> dict | None:
        return self.sessions.get(name)

    async def patch_session_status(self, namespace: str, name: str, patch: dict) -> None:
        self.patched.append(patch)


def _context(buckets, sessions: dict[str, dict] | None = None) -> SimpleNamespace:
    return SimpleNamespace(settings=OperatorSettings(), buckets=buckets, kube=_Kube(sessions or {}))


def _store(buckets: MemoryBuckets, session: dict, seed: int) -> str:
    key = summary_key("stepscope", session)
    buckets.put_bytes(key, job_summary(seed).model_dump_json().encode())
    return key


def test_the_summary_key_comes_from_the_sessions_identity_only():
    session = _session("base", uri=f"s3://stepscope/{ELSEWHERE.removesuffix('summary.json')}")
    assert summary_key("stepscope", session) == "stepscope/team-a/base/uid-base/summary.json"


def test_a_named_baseline_whose_status_points_elsewhere_is_not_read_from_there():
    buckets = MemoryBuckets()
    buckets.put_bytes(ELSEWHERE, job_summary(9).model_dump_json().encode())
    forged = _session("base", uri="s3://stepscope/" + ELSEWHERE.removesuffix("summary.json"))
    ctx = _context(buckets, {"base": forged})
    view = SessionView.from_body(_session("current", baseline={"sessionRef": "base"}))

    comparison = asyncio.run(compare_with_baseline(ctx, view, job_summary(1)))
    assert ELSEWHERE not in buckets.reads
    assert comparison.verdict == "inconclusive"
    assert comparison.reason == "baseline session base has no summary.json (expired artifacts?)"

    # Its own folder's summary is what it is compared with.
    _store(buckets, forged, 2)
    comparison = asyncio.run(compare_with_baseline(ctx, view, job_summary(1)))
    assert comparison.verdict != "inconclusive" and comparison.baseline_sessions == ["base"]
    assert ELSEWHERE not in buckets.reads


def test_a_schedules_sessions_are_judged_from_their_own_folders():
    buckets = MemoryBuckets()
    buckets.put_bytes(ELSEWHERE, job_summary(9).model_dump_json().encode())
    pointing_away = "s3://stepscope/" + ELSEWHERE.removesuffix("summary.json")
    current = _session("nightly-3", uri=pointing_away)
    earlier = [_session("nightly-2", uri=pointing_away), _session("nightly-1")]
    _store(buckets, earlier[1], 1)
    ctx = _context(buckets)

    comparison = asyncio.run(judge_session(ctx, current, earlier, 5.0, "nightly"))
    assert ELSEWHERE not in buckets.reads
    assert comparison.verdict == "inconclusive"
    assert comparison.reason == "session nightly-3 has no summary.json (expired artifacts?)"
    assert comparison.baseline_sessions == ["nightly-1"]


class _Endless(io.RawIOBase):
    """A body that never ends: only a bounded read returns."""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise AssertionError("an unbounded read of a tenant-written object")
        return b" " * size


def test_a_summary_is_read_within_a_byte_cap_and_refused_past_it(monkeypatch):
    monkeypatch.setattr(baselines, "MAX_BASELINE_SUMMARY_BYTES", 4096)
    buckets = SimpleNamespace(open_stream=lambda key: _Endless())
    ctx = SimpleNamespace(settings=OperatorSettings(), buckets=buckets)
    with pytest.raises(UnreadableSummary, match="over 4096 bytes, the most the operator reads"):
        load_summary(ctx, _session("huge"))


def test_an_oversized_baseline_makes_an_inconclusive_verdict_that_says_so(monkeypatch):
    buckets = MemoryBuckets()
    base = _session("base")
    key = _store(buckets, base, 2)
    monkeypatch.setattr(baselines, "MAX_BASELINE_SUMMARY_BYTES", len(buckets.objects[key]) - 1)
    ctx = _context(buckets, {"base": base})
    view = SessionView.from_body(_session("current", baseline={"sessionRef": "base"}))
    comparison = asyncio.run(compare_with_baseline(ctx, view, job_summary(1)))
    assert comparison.verdict == "inconclusive"
    assert comparison.reason.startswith("baseline session base has a summary.json over ")
