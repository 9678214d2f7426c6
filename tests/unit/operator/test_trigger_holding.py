"""A trigger does not judge a job by samples a session's profiling may have slowed: while a
session holds the job's target and until every rank has stepped RECENT_STEPS past it, the
band, straggler and data-wait rules see no sample, and the hang rule sees every one. Each
scenario is also run unheld, where the same samples fire: the hold is what keeps it quiet."""

from __future__ import annotations

from stepscope_operator.sessions.queueing import Limits, queue_entry, target_key
from stepscope_operator.sessions.turns import PLAN_MAX_AGE_SECONDS, TurnBoard
from stepscope_operator.triggers.holding import ProfilingHold
from stepscope_operator.triggers.judging import JobJudge
from stepscope_operator.triggers.samples import JobSample, RankSample

from stepscope.api.agent import RECENT_STEPS
from stepscope.api.session import TargetSpec
from stepscope.api.trigger import TriggerReason, TriggerRules

NOW = 1_800_000_000.0
STEP_MS = 12.0
SAMPLE_STEPS = 400  # a 5 s sample interval at 12 ms steps


RANKS = 4
PROFILED = (STEP_MS * 1.8, *(STEP_MS * 1.3,) * (RANKS - 1))


class Job:
    """A four-rank job sampled at an interval: each sample its agents' medians."""

    def __init__(self) -> None:
        self.step = 0

    def sample(
        self,
        ms: tuple[float, ...] = (STEP_MS,) * RANKS,
        steps: int = SAMPLE_STEPS,
        stalled_s: float = 0.0,
    ) -> JobSample:
        self.step += steps
        ranks = tuple(
            RankSample(r, f"p{r}", f"n{r}", self.step, t, 0.0, NOW - stalled_s, NOW, t)
            for r, t in enumerate(ms)
        )
        return JobSample(ranks)


def judge() -> JobJudge:
    return JobJudge(
        TriggerRules.model_validate({"stepTimeBand": {"window": 20, "warmupSamples": 10}})
    )


def warmed(judge: JobJudge, job: Job) -> JobJudge:
    for i in range(20):
        assert judge.judge(job.sample((STEP_MS + i % 3 * 0.1,) * RANKS)) == []
    assert judge.steady()
    return judge


def a_profiled_session(judge: JobJudge, job: Job, held: bool) -> list[TriggerReason]:
    """Six samples while a session profiles the job (its window slows every rank 30%, and
    rank 0, which takes the only trace, 80%), then the first sample after it, whose medians
    still hold profiled steps (the session ended a few steps after its window), then quiet."""
    found = []
    for _ in range(6):
        found += judge.judge(job.sample(PROFILED), profiling=held)
    found += judge.judge(job.sample(PROFILED, steps=5))
    for _ in range(5):
        found += judge.judge(job.sample())
    return [e.reason for e in found]


def test_a_sessions_profiling_fires_nothing_while_held():
    job = Job()
    assert a_profiled_session(warmed(judge(), job), job, held=True) == []


def test_the_same_samples_unheld_fire_on_the_band_and_the_straggler():
    job = Job()
    reasons = a_profiled_session(warmed(judge(), job), job, held=False)
    assert TriggerReason.STEP_TIME_OUT_OF_BAND in reasons
    assert TriggerReason.STRAGGLER in reasons


def test_held_samples_do_not_enter_the_band_and_the_job_is_not_steady_meanwhile():
    job = Job()
    j = warmed(judge(), job)
    window = list(j.band.window)
    j.judge(job.sample(PROFILED), profiling=True)
    assert list(j.band.window) == window
    assert not j.steady()
    assert j.describe().startswith("held: a session is profiling the job; in band")
    j.judge(job.sample(steps=1))
    assert not j.steady()
    assert f"held until every rank reaches step {job.step + RECENT_STEPS}" in j.describe()
    j.judge(job.sample(steps=RECENT_STEPS))
    assert j.steady()
    assert list(j.band.window) == [*window[1:], STEP_MS]


def test_a_stall_during_a_session_still_fires():
    job = Job()
    j = warmed(judge(), job)
    found = j.judge(job.sample(steps=0, stalled_s=3600), profiling=True)
    assert [e.reason for e in found] == [TriggerReason.NO_PROGRESS]


def test_the_hold_ends_when_the_slowest_rank_has_stepped_past_the_horizon():
    hold = ProfilingHold()
    assert hold.holds(True, [100, 102])
    assert hold.holds(False, [])  # no rank reported a step yet: the horizon is unknown
    assert hold.holds(False, [110, 112])  # the first sample after: horizon 112 + RECENT_STEPS
    horizon = 112 + RECENT_STEPS
    assert hold.holds(False, [horizon - 1, horizon + 50])  # one rank lags
    assert not hold.holds(False, [horizon, horizon + 50])
    assert not hold.holding
    assert hold.holds(True, [horizon + 60])  # a new session holds again


def session(name: str, namespace: str = "team", phase: str | None = None, **spec) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}/{name}",
            "creationTimestamp": "2026-12-07T08:00:00Z",
        },
        "spec": {"target": {"pytorchJob": "llama", "ranks": "0"}, **spec},
        "status": {"phase": phase} if phase else {},
    }


class Clock:
    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self) -> float:
        return self.at


def test_the_turn_board_says_which_jobs_a_session_holds():
    index = [session("queued"), session("done", phase="Succeeded")]
    index.append(session("hang", phase="Watching", mode="hang-check"))
    index.append(session("elsewhere", namespace="other", phase="Capturing"))
    clock = Clock()
    board = TurnBoard(lambda: [queue_entry(b) for b in index], Limits(16, 4, 8), clock)
    llama = target_key(TargetSpec.model_validate({"pytorchJob": "llama"}).to_wire())
    assert llama == ("pytorchJob", "llama")
    assert not board.target_held("team", llama)  # queued, finished, a hang check: none holds it
    assert board.take_turn("team/queued") is None  # claimed: it holds the job before its write
    clock.at += PLAN_MAX_AGE_SECONDS * 2
    assert board.target_held("team", llama)
    assert board.target_held("other", llama)
    assert not board.target_held("team", ("pytorchJob", "mistral"))
    index[1:2] = []
    index[0]["status"]["phase"] = "Succeeded"
    assert board.target_held("team", llama)  # the set is at most PLAN_MAX_AGE_SECONDS old
    clock.at += PLAN_MAX_AGE_SECONDS * 2
    assert not board.target_held("team", llama)
