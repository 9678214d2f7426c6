import re

import pytest
from stepscope_operator.sessions.pod_arming import capture_id_for

from stepscope.api.agent import CAPTURE_ID_PATTERN
from stepscope.storage import (
    RankArtifact,
    SessionArtifact,
    rank_key,
    s3_uri,
    session_key,
    session_prefix,
    window_prefix,
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


def test_each_window_of_a_repeated_session_has_its_own_folder_and_capture_id():
    prefix = session_prefix("stepscope", "team-a", "llama-ft-1", "abc-123")
    second = window_prefix(prefix, 2)
    assert second == "stepscope/team-a/llama-ft-1/abc-123/window-2/"
    assert rank_key(second, 3, RankArtifact.TRACE).endswith("abc-123/window-2/rank-3/trace.json.gz")
    with pytest.raises(ValueError, match="window=0"):
        window_prefix(prefix, 0)
    uid = "9de69486-0000-4000-8000-000000000000"
    assert capture_id_for("nightly", uid) == "nightly-9de69486"
    assert capture_id_for("nightly", uid, 1) == "nightly-9de69486"
    ids = {capture_id_for("nightly", uid, n) for n in range(1, 11)}
    assert len(ids) == 10 and capture_id_for("nightly", uid, 10) == "nightly-9de69486-w10"
    # The longest name, at the last window and a re-plan's suffix, is still a capture id.
    longest = f"{capture_id_for('x' * 253, uid, 10)}-r12"
    assert len(longest) <= 63 and re.match(CAPTURE_ID_PATTERN, longest)
