"""Upload one file with a presigned grant: a size-bound POST, a single PUT, or multipart
parts plus complete.

The agent holds no storage credentials, only these URLs. Every grant binds the size (a
POST policy's content-length-range, or a signed Content-Length), so the storage server
refuses more than the budget whatever the agent sends; the agent checks first, so a
capture over budget fails with OVER_BUDGET instead of a refusal. Transient failures (connection
errors, 5xx, 429) are retried with exponential back-off; a refusal (other 4xx, e.g. an
expired grant) fails at once with the storage server's own error code and message.
"""

from __future__ import annotations

import functools
import re
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from stepscope.api.agent import ArtifactGrant, FailureCode, MultipartGrant, PostGrant

ATTEMPTS = 5
FIRST_BACKOFF_S = 0.5
REQUEST_TIMEOUT_S = 60.0


class UploadError(Exception):
    """The upload did not happen; the message says why in words a person can act on, the
    code whether storage refused it or could not be reached."""

    def __init__(self, message: str, code: FailureCode = FailureCode.UPLOAD_UNREACHABLE) -> None:
        super().__init__(message)
        self.code = code


def upload_file(path: Path, grant: ArtifactGrant) -> int:
    """Upload ``path`` to the grant's key and return the bytes sent."""
    # An expired grant is left for the storage server to refuse: its clock is the one that
    # counts, and its error message is the one a person can look up.
    size = path.stat().st_size
    if grant.post is not None:
        _with_retries(lambda: _post(grant.post, path, size), grant.key)
    elif grant.put_url is not None:
        _with_retries(lambda: _put(grant.put_url, path, 0, size), grant.key)
    else:
        _upload_parts(path, size, grant.multipart, grant.key)
    return size


def _upload_parts(path: Path, size: int, multipart: MultipartGrant, key: str) -> None:
    part_size = multipart.part_size_bytes
    count = max(1, -(-size // part_size))
    if count > len(multipart.part_urls):
        raise UploadError(
            f"{path.name} is {size} bytes, more than the {multipart.capacity_bytes} bytes "
            f"its {len(multipart.part_urls)} part grants carry for {key}",
            FailureCode.OVER_BUDGET,
        )
    etags = []
    for number in range(1, count + 1):
        offset = (number - 1) * part_size
        length = min(part_size, size - offset)
        url = multipart.part_urls[number - 1]
        headers = _with_retries(
            functools.partial(_put, url, path, offset, length), f"{key} part {number}"
        )
        etags.append(headers.get("ETag", ""))
    body = "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        for n, etag in enumerate(etags, start=1)
    )
    document = f"<CompleteMultipartUpload>{body}</CompleteMultipartUpload>".encode()
    _with_retries(lambda: _request("POST", multipart.complete_url, document), f"{key} complete")


def _post(grant: PostGrant, path: Path, size: int):
    """The form upload S3 calls POST Object: the policy's fields, then the file, streamed."""
    if size > grant.max_bytes:
        raise UploadError(
            f"{path.name} is {size} bytes, more than the {grant.max_bytes} bytes its grant allows",
            FailureCode.OVER_BUDGET,
        )
    boundary = f"stepscope-{uuid.uuid4().hex}"
    head = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in grant.fields.items()
    )
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(grant.url, data=_stream(head, path, tail), method="POST")
    request.add_header("Content-Type", f"multipart/form-data; boundary={boundary}")
    request.add_header("Content-Length", str(len(head) + size + len(tail)))
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        response.read()
        return response.headers


def _stream(head: bytes, path: Path, tail: bytes, chunk_bytes: int = 1 << 20):
    """The form body in chunks, so a trace of any size is never held in memory whole."""
    yield head
    with path.open("rb") as file:
        while chunk := file.read(chunk_bytes):
            yield chunk
    yield tail


def _put(url: str, path: Path, offset: int, length: int):
    with path.open("rb") as file:
        file.seek(offset)
        return _request("PUT", url, file.read(length))


def _request(method: str, url: str, body: bytes):
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Content-Length", str(len(body)))
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        answer = response.read()
        # CompleteMultipartUpload can fail with 200 and an <Error> document.
        if b"<Error>" in answer:
            raise urllib.error.HTTPError(url, 500, _s3_error(answer), response.headers, None)
        return response.headers


def _with_retries(action, what: str):
    # The storage server's words come before the key: status clips long reasons, and the
    # key (which can be long) is the part a person needs least.
    delay = FIRST_BACKOFF_S
    last_error = ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return action()
        except urllib.error.HTTPError as error:
            detail = _s3_error(error.read() if error.fp else b"") or error.reason
            last_error = f"HTTP {error.code}: {detail}"
            if 400 <= error.code < 500 and error.code not in (408, 429):
                raise UploadError(
                    f"storage refused the upload: {last_error} ({what})",
                    FailureCode.UPLOAD_REFUSED,
                ) from None
        except (urllib.error.URLError, OSError) as error:
            last_error = str(getattr(error, "reason", error))
        if attempt < ATTEMPTS:
            time.sleep(delay)
            delay *= 2
    raise UploadError(f"could not upload after {ATTEMPTS} attempts: {last_error} ({what})")


def _s3_error(document: bytes) -> str:
    """'Code: Message' from an S3 error document, or '' when it is not one."""
    text = document.decode(errors="replace")
    code = re.search(r"<Code>(.*?)</Code>", text)
    message = re.search(r"<Message>(.*?)</Message>", text)
    return ": ".join(m.group(1) for m in (code, message) if m)
