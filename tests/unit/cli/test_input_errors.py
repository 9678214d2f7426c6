"""A user's mistake gets one line naming what is wrong and the fix, exit 2, no traceback:
S3 without credentials or out of reach, a missing path, a bad --placement or --out, and a
`diff` whose second input is missing, caught before the first is analysed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from stepscope.analysis.reading.trace_sources import S3_ENDPOINT_ENV
from stepscope.cli.inputs import INPUT_ERROR_EXIT, InputError, reading_s3, s3_error_message

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stepscope(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stepscope.cli", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _s3_environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No credentials from anywhere, and nothing that would leave this machine: no instance
    metadata, no config files, an endpoint on a closed local port, one attempt per call."""
    env = {k: v for k, v in os.environ.items() if k not in AWS_VARIABLES}
    env.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(tmp_path / "absent-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "absent-credentials"),
        AWS_MAX_ATTEMPTS="1",
        **{S3_ENDPOINT_ENV: f"http://127.0.0.1:{_closed_port()}"},
        **extra,
    )
    return env


def _one_clear_line(result: subprocess.CompletedProcess, command: str) -> str:
    assert result.returncode == INPUT_ERROR_EXIT, result.stderr
    assert "Traceback" not in result.stderr
    errors = [
        line for line in result.stderr.splitlines() if line.startswith(f"stepscope {command}:")
    ]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_s3_without_credentials_names_the_variables(tmp_path):
    result = _stepscope(
        "analyze",
        "s3://traces/team/job/",
        "--out",
        str(tmp_path / "out"),
        env=_s3_environment(tmp_path),
    )
    line = _one_clear_line(result, "analyze")
    assert "s3://traces/team/job/: no S3 credentials found" in line
    assert "AWS_ACCESS_KEY_ID" in line and "AWS_SECRET_ACCESS_KEY" in line
    assert S3_ENDPOINT_ENV in line


def test_an_unreachable_s3_endpoint_names_it_and_the_variable(tmp_path):
    env = _s3_environment(tmp_path, AWS_ACCESS_KEY_ID="key", AWS_SECRET_ACCESS_KEY="secret")
    result = _stepscope("analyze", "s3://traces/job/", "--out", str(tmp_path / "out"), env=env)
    line = _one_clear_line(result, "analyze")
    assert f"cannot reach the S3 endpoint {env[S3_ENDPOINT_ENV]};" in line
    assert f"set {S3_ENDPOINT_ENV}" in line


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "from the server"}}, "ListObjectsV2")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("NoSuchBucket", "bucket traces does not exist at this endpoint"),
        ("AccessDenied", "S3 refused the credentials (AccessDenied)"),
        ("InvalidAccessKeyId", "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to keys"),
        ("SlowDown", "S3 answered SlowDown: from the server"),
    ],
)
def test_s3_refusals_say_what_the_server_meant(code, expected):
    with pytest.raises(InputError) as error_info, reading_s3("s3://traces/job/"):
        raise _client_error(code)
    message = str(error_info.value)
    assert message.startswith("s3://traces/job/: ") and expected in message
    assert "\n" not in message


def test_other_errors_pass_through_untranslated():
    assert s3_error_message(KeyError("x"), "s3://b/p") is None
    assert s3_error_message(NoCredentialsError(), "s3://b/p") is not None
    with pytest.raises(KeyError), reading_s3("s3://b/p"):
        raise KeyError("x")


def test_a_missing_path_is_named_with_what_to_pass(tmp_path):
    missing = tmp_path / "no-such-traces"
    line = _one_clear_line(_stepscope("analyze", str(missing)), "analyze")
    assert f"{missing}: no such file or folder; pass a folder of per-rank traces" in line


def test_a_malformed_s3_uri_is_refused_before_any_request():
    line = _one_clear_line(_stepscope("analyze", "s3:///prefix"), "analyze")
    assert "write s3://BUCKET/PREFIX" in line


def test_an_unreadable_placement_is_refused_before_any_rank_is_summarised(tmp_path):
    result = _stepscope(
        "analyze",
        str(SCENARIOS / "straggler_8ranks"),
        "--placement",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
    )
    line = _one_clear_line(result, "analyze")
    assert f"--placement {tmp_path}: is a directory; pass a JSON file" in line
    assert "summarising" not in result.stderr


def test_an_out_that_is_a_file_is_refused_before_any_rank_is_summarised(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("")
    result = _stepscope("analyze", str(SCENARIOS / "straggler_8ranks"), "--out", str(taken))
    assert f"--out {taken}: is a file" in _one_clear_line(result, "analyze")
    assert "summarising" not in result.stderr


@pytest.mark.parametrize("missing_side", ["a", "b"])
def test_diff_checks_both_inputs_before_analysing_either(tmp_path, missing_side):
    missing = str(tmp_path / "no-such-run")
    present = str(SCENARIOS / "balanced")
    a, b = (missing, present) if missing_side == "a" else (present, missing)
    out = tmp_path / "out"
    result = _stepscope("diff", a, b, "--out", str(out))
    assert f"{missing}: no such file or folder" in _one_clear_line(result, "diff")
    assert "summarising" not in result.stderr and not (out / "a").exists()


def test_diff_refuses_a_malformed_s3_uri_before_analysing(tmp_path):
    result = _stepscope("diff", str(SCENARIOS / "balanced"), "s3://", "--out", str(tmp_path))
    assert "s3://: not an s3:// URI with a bucket" in _one_clear_line(result, "diff")
    assert "summarising" not in result.stderr
