"""Link lifetimes are bounded by the operator's settings, and the Event says until when."""

from datetime import UTC, datetime

import pytest
from stepscope_operator.access.artifacts import EVENT_NAMES_SHOWN, bearer_token, describe_issued
from stepscope_operator.settings import SettingsError, load_settings

from stepscope.artifact_links import MAX_LINK_SECONDS, MIN_LINK_SECONDS


def test_default_link_lifetime_is_minutes():
    assert load_settings({}).artifact_link_seconds == 300


@pytest.mark.parametrize("seconds", [MIN_LINK_SECONDS, 5, MAX_LINK_SECONDS])
def test_lifetimes_within_bounds_are_accepted(seconds):
    settings = load_settings({"STEPSCOPE_ARTIFACT_LINK_SECONDS": str(seconds)})
    assert settings.artifact_link_seconds == seconds


@pytest.mark.parametrize("seconds", [0, -1, MAX_LINK_SECONDS + 1, 7 * 86400])
def test_lifetimes_outside_bounds_name_the_variable(seconds):
    with pytest.raises(SettingsError, match="STEPSCOPE_ARTIFACT_LINK_SECONDS"):
        load_settings({"STEPSCOPE_ARTIFACT_LINK_SECONDS": str(seconds)})


def test_an_endpoint_without_tls_is_refused():
    with pytest.raises(SettingsError, match="STEPSCOPE_ARTIFACTS_TLS_DIR"):
        load_settings({"STEPSCOPE_ARTIFACTS_PORT": "8443"})


def test_event_names_the_user_the_files_and_the_expiry():
    until = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)
    message = describe_issued("system:serviceaccount:a:reader", ["report.html"], until)
    assert message == (
        "system:serviceaccount:a:reader was given read links to report.html, "
        "valid until 2026-12-01T10:05:00Z"
    )


def test_event_counts_rank_files_of_a_large_session():
    names = ["report.html", "summary.json"] + [
        f"rank-{r}/{f}" for r in range(64) for f in ("trace.json.gz", "summary.json")
    ]
    assert len(names) > EVENT_NAMES_SHOWN
    message = describe_issued("alice", names, datetime(2026, 12, 1, tzinfo=UTC))
    assert "report.html, summary.json and 128 rank files of ranks 0-63" in message
    assert len(message) < 200


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer ", None),
        (None, None),
    ],
)
def test_bearer_token_is_read_only_from_a_bearer_header(header, token):
    assert bearer_token(header) == token
