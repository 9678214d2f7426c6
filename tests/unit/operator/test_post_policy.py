"""The operator's own SigV4 POST signing agrees with botocore's, field for field.

The real storage server's acceptance and refusals of these forms are tested against
versitygw in tests/integration/operator/test_upload_grants_s3.py."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import boto3
from botocore.config import Config
from stepscope_operator.storage.post_policy import (
    Credentials,
    PostPolicySigner,
    policy_signature,
    signing_key,
)

ENDPOINT = "http://127.0.0.9:9000"
KEY = "p/ns/s/u/rank-3/trace.json.gz"
FIELDS = {"Content-Type": "application/gzip"}
CONDITIONS = [{"Content-Type": "application/gzip"}, ["content-length-range", 0, 1 << 20]]


def _botocore_form(token: str | None = None) -> dict:
    client = boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", aws_session_token=token
    ).client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name="eu-west-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    return client.generate_presigned_post(
        "bkt", KEY, Fields=dict(FIELDS), Conditions=list(CONDITIONS), ExpiresIn=600
    )


def _signer(token: str | None = None) -> PostPolicySigner:
    credentials = Credentials("AKIDEXAMPLE", "secret", token)
    return PostPolicySigner(f"{ENDPOINT}/bkt", "bkt", "eu-west-1", lambda: credentials)


def _policy(form: dict) -> dict:
    return json.loads(base64.b64decode(form["fields"]["policy"]))


def test_the_signing_key_and_signature_match_botocore_on_its_own_policy():
    form = _botocore_form()
    day = form["fields"]["x-amz-date"][:8]
    key = signing_key("secret", day, "eu-west-1")
    assert policy_signature(key, form["fields"]["policy"]) == form["fields"]["x-amz-signature"]
    assert (
        policy_signature(signing_key("other", day, "eu-west-1"), form["fields"]["policy"])
        != (form["fields"]["x-amz-signature"])
    )


def test_the_form_has_botocores_fields_and_conditions_at_the_same_moment():
    theirs = _botocore_form()
    stamp = datetime.strptime(theirs["fields"]["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    ours = _signer().sign(KEY, 600, dict(FIELDS), list(CONDITIONS), now=stamp)
    assert ours["url"] == theirs["url"] == f"{ENDPOINT}/bkt"
    assert set(ours["fields"]) == set(theirs["fields"])
    for name in ("Content-Type", "key", "x-amz-algorithm", "x-amz-credential", "x-amz-date"):
        assert ours["fields"][name] == theirs["fields"][name], name
    mine, boto = _policy(ours), _policy(theirs)
    assert mine["expiration"] == boto["expiration"]
    assert sorted(map(json.dumps, mine["conditions"])) == sorted(
        map(json.dumps, boto["conditions"])
    )
    # Signed over its own encoding of the same policy, under the same key.
    key = signing_key("secret", stamp.strftime("%Y%m%d"), "eu-west-1")
    assert ours["fields"]["x-amz-signature"] == policy_signature(key, ours["fields"]["policy"])


def test_temporary_credentials_add_the_token_as_a_field_and_a_condition():
    theirs = _botocore_form(token="session-token")
    stamp = datetime.strptime(theirs["fields"]["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    ours = _signer("session-token").sign(KEY, 600, dict(FIELDS), list(CONDITIONS), now=stamp)
    assert ours["fields"]["x-amz-security-token"] == "session-token"
    assert {"x-amz-security-token": "session-token"} in _policy(ours)["conditions"]
    assert set(ours["fields"]) == set(theirs["fields"])


def test_every_signed_field_is_a_condition_so_none_can_be_changed():
    form = _signer().sign(KEY, 60, dict(FIELDS), list(CONDITIONS))
    conditions = _policy(form)["conditions"]
    for name, value in form["fields"].items():
        if name not in ("policy", "x-amz-signature"):
            assert {name: value} in conditions, name
    assert {"bucket": "bkt"} in conditions


def test_a_new_day_derives_a_new_signing_key():
    signer = _signer()
    first = signer.sign(KEY, 60, {}, [], now=datetime(2026, 12, 1, 23, 59, 59, tzinfo=UTC))
    second = signer.sign(KEY, 60, {}, [], now=datetime(2026, 12, 2, 0, 0, 1, tzinfo=UTC))
    key = signing_key("secret", "20261202", "eu-west-1")
    assert second["fields"]["x-amz-signature"] == policy_signature(key, second["fields"]["policy"])
    assert "/20261201/" in first["fields"]["x-amz-credential"]
    assert "/20261202/" in second["fields"]["x-amz-credential"]
