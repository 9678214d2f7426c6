"""The top of the report, as pure functions: the title's subject, the verdict sentence, and
where the Perfetto steps say the merged trace is. (test_report_in_browser.py reads the same
page as Chromium draws it.)"""

from __future__ import annotations

from datetime import datetime

from synthetic_ranks import STEP_US, rank_summary

from stepscope.analysis.merging.merge import merge_ranks
from stepscope.analysis.reports.html import render_report
from stepscope.analysis.reports.origin import ReportOrigin, origin_facts, report_title
from stepscope.analysis.reports.verdict import verdict_sentence


def job_from(sources: list[str], lag_us: dict[int, float] | None = None, placement=None):
    summaries = [
        rank_summary(rank, lag_us=(lag_us or {}).get(rank, 0.0)).model_copy(
            update={"source": source}
        )
        for rank, source in enumerate(sources)
    ]
    return merge_ranks(summaries, placement)


def test_an_offline_title_names_the_folder_above_rank_subfolders_and_s3_prefixes():
    local = job_from([f"runs/llama-7b/rank-{r}/trace.json.gz" for r in range(4)])
    assert report_title(local, None) == "llama-7b: stepscope report"
    assert origin_facts(local, None)[:2] == ["traces in folder llama-7b", "4 ranks"]
    s3 = job_from([f"s3://bucket/exp/run-3/rank{r}.json.gz" for r in range(2)])
    assert report_title(s3, None) == "run-3: stepscope report"


def test_an_analysis_jobs_report_without_an_origin_does_not_name_a_storage_folder():
    job = job_from([f"s3://b/team-a/llama/0c1d/rank-{r}/trace.json.gz" for r in range(2)])
    assert report_title(job, None, offline=False) == "stepscope report: 2 ranks"
    html = render_report(job, merged={0: ["rank 0"]})
    assert "0c1d" not in html.split("</header>")[0]
    assert "stepscope artifacts SESSION -n NAMESPACE --download DIR" in html


def test_an_origin_names_target_session_and_a_naive_capture_time_as_utc():
    job = job_from(["a/rank-0.json", "a/rank-1.json"])
    origin = ReportOrigin("PyTorchJob team-a/llama", "team-a/llama-1", datetime(2026, 12, 2, 9, 5))
    assert report_title(job, origin) == "PyTorchJob team-a/llama: stepscope report"
    facts = origin_facts(job, origin)
    assert facts[:3] == ["session team-a/llama-1", "captured 2026-12-02 09:05 UTC", "2 ranks"]
    assert not any("folder" in fact for fact in facts)
    html = render_report(job, origin=origin)
    assert "stepscope artifacts llama-1 -n team-a --open trace" in html


def test_the_straggler_verdict_names_its_pod_and_node_and_its_confidence():
    placement = {r: (f"worker-{r}", f"node-{r // 2}") for r in range(4)}
    job = job_from([f"r/rank-{r}.json" for r in range(4)], {2: 0.3 * STEP_US}, placement)
    assert job.straggler is not None and job.findings[0].id == "straggler-rank"
    sentence = verdict_sentence(job)
    assert sentence.startswith("Rank 2 (pod worker-2 on node node-1) is a straggler: ")
    assert sentence.endswith(f"; confidence {job.findings[0].confidence:.2f}.")
    assert f"{job.straggler.excess_ms:.1f} ms" in sentence


def test_without_findings_the_verdict_says_nothing_stands_out_and_gives_the_step():
    job = job_from(["r/rank-0.json", "r/rank-1.json"]).model_copy(update={"findings": []})
    sentence = verdict_sentence(job)
    assert sentence.startswith("Nothing stands out")
    assert f"{job.median_step_ms:.1f} ms" in sentence and "confidence" not in sentence
