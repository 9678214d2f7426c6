"""Which keys a session's readers get links to: the layout's result files under the session's
own folder, and nothing else."""

import re
from pathlib import Path

from stepscope.artifact_links import (
    READABLE_RANK_ARTIFACTS,
    READABLE_SESSION_ARTIFACTS,
    ArtifactLinks,
    links_path,
    readable_artifact,
    readable_artifacts,
)
from stepscope.storage import (
    RankArtifact,
    SessionArtifact,
    rank_key,
    session_key,
    session_prefix,
)

PREFIX = session_prefix("stepscope", "team-a", "llama", "uid-1")


SECURITY_DOC = Path(__file__).resolve().parents[3] / "docs" / "operations" / "security.md"


def test_every_result_file_of_the_layout_is_readable():
    keys = [session_key(PREFIX, a) for a in READABLE_SESSION_ARTIFACTS]
    keys += [rank_key(PREFIX, r, a) for r in (0, 1) for a in READABLE_RANK_ARTIFACTS]
    names = [readable_artifact(PREFIX, k) for k in keys]
    assert names == [k.removeprefix(PREFIX) for k in keys]
    assert "rank-1/trace.json.gz" in names and "report.html" in names


def test_the_plan_records_and_the_jobs_answer_are_not_results():
    """analysis-plan.json holds the analysis Job's upload grants for the report: a reader who
    got it could overwrite what every other reader sees."""
    for internal in (
        SessionArtifact.PLAN,
        SessionArtifact.ANALYSIS_PLAN,
        SessionArtifact.ANALYSIS_RESULT,
    ):
        assert readable_artifact(PREFIX, session_key(PREFIX, internal)) is None, internal


def test_the_allow_list_is_exactly_what_the_security_doc_lists():
    text = SECURITY_DOC.read_text(encoding="utf-8")
    covered = text.split("**What the links cover**", 1)[1].split("Not the operator's", 1)[0]
    session_files = set(re.findall(r"`([a-z.-]+\.[a-z]+)`", covered))
    rank_files = set(re.search(r"`rank-<r>/\{([^}]*)\}`", covered).group(1).split(","))
    assert session_files == {a.value for a in READABLE_SESSION_ARTIFACTS}
    assert rank_files == {a.value for a in READABLE_RANK_ARTIFACTS}


def test_keys_of_other_sessions_are_never_readable():
    # Same name, another uid (a deleted predecessor) and a name that extends this one.
    predecessor = session_prefix("stepscope", "team-a", "llama", "uid-0")
    longer = "stepscope/team-a/llama-2/uid-1/"
    other_namespace = session_prefix("stepscope", "team-b", "llama", "uid-1")
    for prefix in (predecessor, longer, other_namespace):
        assert readable_artifact(PREFIX, session_key(prefix, SessionArtifact.REPORT)) is None


def test_unexpected_paths_under_the_folder_are_not_readable():
    for relative in (
        "rank-1/../../team-b/x/report.html",
        "rank-01/trace.json.gz",
        "rank-1/nested/trace.json.gz",
        "rank--1/summary.json",
        "rank-1/trace.json.gz.part",
        "notes.txt",
        "",
    ):
        assert readable_artifact(PREFIX, PREFIX + relative) is None, relative


def test_listing_is_filtered_and_ordered_session_files_then_ranks_by_number():
    listed = [
        (rank_key(PREFIX, 10, RankArtifact.TRACE), 10),
        (rank_key(PREFIX, 2, RankArtifact.SUMMARY), 2),
        (session_key(PREFIX, SessionArtifact.PLAN), 1),
        (session_key(PREFIX, SessionArtifact.REPORT), 5),
        (PREFIX + "stray.bin", 9),
    ]
    found = readable_artifacts(PREFIX, listed)
    assert [(name, size) for name, _, size in found] == [
        ("report.html", 5),
        ("rank-2/summary.json", 2),
        ("rank-10/trace.json.gz", 10),
    ]
    assert all(key == PREFIX + name for name, key, _ in found)


def test_links_path_names_namespace_and_session():
    assert links_path("team-a", "llama") == "/v1/namespaces/team-a/profilesessions/llama/artifacts"


def test_reply_finds_an_artifact_by_name():
    reply = ArtifactLinks.model_validate(
        {
            "namespace": "team-a",
            "session": "llama",
            "uid": "uid-1",
            "expires_at": "2026-12-01T10:00:00Z",
            "links": [{"artifact": "report.html", "url": "https://s3/x", "bytes": 3}],
        }
    )
    assert reply.find("report.html").url == "https://s3/x"
    assert reply.find("summary.json") is None
