import pytest

from stepscope.storage import (
    RankArtifact,
    SessionArtifact,
    rank_key,
    s3_uri,
    session_key,
    session_prefix,
)


def test_layout_matches_design():
    prefix = session_prefix("stepscope", "team-a", "llama-ft-1", "abc-123")
    assert prefix == "stepscope/team-a/llama-ft-1/abc-123/"
    assert (
        rank_key(prefix, 3, RankArtifact.TRACE)
        == "stepscope/team-a/llama-ft-1/abc-123/rank-3/trace.json.gz"
    )
    assert rank_key(prefix, 0, "summary.json").endswith("/rank-0/summary.json")
    assert session_key(prefix, SessionArtifact.REPORT).endswith("abc-123/report.html")
    assert s3_uri("b", prefix) == "s3://b/stepscope/team-a/llama-ft-1/abc-123/"


def test_prefix_is_normalised():
    assert session_prefix("/a/b/", "ns", "s", "u") == "a/b/ns/s/u/"
    assert session_prefix("", "ns", "s", "u") == "ns/s/u/"


def test_bad_segments_are_refused():
    with pytest.raises(ValueError, match="namespace"):
        session_prefix("p", "a/b", "s", "u")
    with pytest.raises(ValueError, match="uid"):
        session_prefix("p", "ns", "s", "")
    with pytest.raises(ValueError):
        rank_key("p/", 0, "secrets.txt")
    with pytest.raises(ValueError, match="rank"):
        rank_key("p/", -1, RankArtifact.TRACE)
