"""What a command's input may be, and the one line it prints when an input cannot be read.

`analyze` and `diff` take local paths, ``s3://`` URIs and (for a summary) ``https://``
links. `check_input` refuses a path that does not exist or a malformed URI before any work
starts, so `diff A B` never analyses A for minutes and then fails on a typo in B.
`reading_s3` turns botocore's errors into an `InputError` naming the cause and the variable
to set, instead of a traceback. Every command exits with `INPUT_ERROR_EXIT` for these.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from stepscope.analysis.reading.trace_sources import S3_ENDPOINT_ENV, S3_REGION_ENV

# argparse's own status for a usage error; `analyze` and `diff` use it for any bad input.
INPUT_ERROR_EXIT = 2
CREDENTIAL_ENVS = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
# Lenient on purpose: S3-compatible servers and old AWS buckets allow more than today's rule.
BUCKET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# S3 error codes that mean "these credentials may not do this", whatever the server.
REFUSED_CODES = {
    "AccessDenied",
    "403",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
}


class InputError(ValueError):
    """An input a command cannot use; the message names it and the fix."""


def check_input(spec: str, accepted: str) -> None:
    """Raise `InputError` unless `spec` is an existing path or a well-formed URI.

    `accepted` lists the forms the command takes, for the message.
    """
    if spec.startswith("s3://"):
        bucket = spec.removeprefix("s3://").partition("/")[0]
        if not BUCKET_NAME.fullmatch(bucket):
            raise InputError(f"{spec}: not an s3:// URI with a bucket; write s3://BUCKET/PREFIX")
        return
    if spec.startswith(("https://", "http://")):
        if not urlsplit(spec).netloc:
            raise InputError(f"{spec}: the URL names no host")
        return
    if not Path(spec).exists():
        raise InputError(f"{spec}: no such file or folder; pass {accepted}")


def os_error_message(error: OSError) -> str:
    """One line for a local file that cannot be read or written."""
    if error.filename is None:
        return str(error)  # Raised with its own message, e.g. "no trace files found under X".
    where = error.filename
    reason = (error.strerror or str(error)).lower()
    if isinstance(error, PermissionError):
        return f"{where}: {reason}; make it readable (or --out writable) for this user"
    return f"{where}: {reason}"


def s3_error_message(error: BaseException, uri: str) -> str | None:
    """One line for a botocore error met reading `uri`, or None when it is not botocore's."""
    if not type(error).__module__.startswith("botocore"):
        return None
    # Imported here: botocore is loaded already when one of its errors exists.
    from botocore import exceptions

    if isinstance(error, (exceptions.NoCredentialsError, exceptions.PartialCredentialsError)):
        return (
            f"{uri}: no S3 credentials found; set {CREDENTIAL_ENVS} (or AWS_PROFILE), and "
            f"{S3_ENDPOINT_ENV} for a server other than AWS S3"
        )
    if isinstance(error, exceptions.EndpointConnectionError):
        tried = urlsplit(error.kwargs.get("endpoint_url", ""))
        return (
            f"{uri}: cannot reach the S3 endpoint {tried.scheme}://{tried.netloc}; set "
            f"{S3_ENDPOINT_ENV} to the URL of your S3-compatible server (unset: AWS S3)"
        )
    if isinstance(error, exceptions.ClientError):
        details = error.response.get("Error", {})
        code = str(details.get("Code", "unknown"))
        bucket = uri.removeprefix("s3://").partition("/")[0]
        if code == "NoSuchBucket":
            return (
                f"{uri}: bucket {bucket} does not exist at this endpoint; check the URI and "
                f"{S3_ENDPOINT_ENV}"
            )
        if code in REFUSED_CODES:
            return (
                f"{uri}: S3 refused the credentials ({code}); set {CREDENTIAL_ENVS} to keys "
                f"that may list and read {bucket}"
            )
        if code in {"NoSuchKey", "404"}:
            return f"{uri}: no such object; check the URI"
        if code in {"PermanentRedirect", "AuthorizationHeaderMalformed", "301"}:
            return f"{uri}: S3 answered {code}; set {S3_REGION_ENV} to the bucket's region"
        return f"{uri}: S3 answered {code}: {details.get('Message', error)}"
    return f"{uri}: {error}"


@contextmanager
def reading_s3(uri: str) -> Iterator[None]:
    """Turn botocore's errors raised inside the block into an `InputError` for `uri`."""
    try:
        yield
    except Exception as error:
        message = s3_error_message(error, uri)
        if message is None:
            raise
        raise InputError(message) from error
