"""The artifact endpoint's TokenReview names its own audience, and a token counts only when
the API server lists that audience back: a token for the API server, which every pod holds,
is refused."""

from stepscope_operator.access.review import caller_from_review, token_review
from stepscope_operator.settings import ENV, load_settings

from stepscope.artifact_links import DEFAULT_TOKEN_AUDIENCE

AUDIENCE = "stepscope-artifacts"
USER = {"username": "system:serviceaccount:team-a:reader", "uid": "u-1", "groups": ["g"]}


def _answer(**status) -> dict:
    return {"status": {"authenticated": True, "user": USER, **status}}


def test_the_review_asks_for_the_audience():
    assert token_review("t", AUDIENCE)["spec"] == {"token": "t", "audiences": [AUDIENCE]}


def test_a_token_accepted_for_the_audience_names_its_caller():
    caller = caller_from_review(_answer(audiences=[AUDIENCE]), AUDIENCE)
    assert caller.username == USER["username"] and caller.groups == ("g",)


def test_a_token_accepted_without_or_for_another_audience_is_refused():
    # No audiences back: an authenticator that does not check them, valid for the API server.
    assert caller_from_review(_answer(), AUDIENCE) is None
    assert caller_from_review(_answer(audiences=[]), AUDIENCE) is None
    assert (
        caller_from_review(_answer(audiences=["https://kubernetes.default.svc"]), AUDIENCE) is None
    )
    assert caller_from_review({"status": {"authenticated": False}}, AUDIENCE) is None


def test_the_operator_and_the_command_default_to_one_audience():
    assert load_settings({}).artifacts_token_audience == DEFAULT_TOKEN_AUDIENCE == AUDIENCE
    settings = load_settings({ENV["artifacts_token_audience"]: "artifacts-prod"})
    assert settings.artifacts_token_audience == "artifacts-prod"
