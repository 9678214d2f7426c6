"""The one storage endpoint this agent uploads to, and the check that every grant points there.

Upload grants are presigned URLs the operator puts into a capture request. A signed request
already comes from the operator, but the endpoint check keeps a mistake or a compromised
operator key from turning the agent into a way to send a tenant's traces to any host: the
webhook injects the storage endpoint (``STORAGE_ENDPOINT_ENV``) next to the keys, and a request
with a grant elsewhere is refused when it is armed, before anything is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from stepscope.api.agent import STORAGE_ENDPOINT_ENV, ArtifactGrant, CaptureRequest
from stepscope.api.hang_dump import HangDumpRequest

_DEFAULT_PORTS = {"http": 80, "https": 443}


class StorageEndpointError(ValueError):
    """A URL that is not a usable storage endpoint."""


class ForeignGrantHost(ValueError):
    """A capture request holds a grant URL outside the configured storage endpoint."""


@dataclass(frozen=True)
class StorageEndpoint:
    """Scheme, host and port that every upload URL must have."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> StorageEndpoint:
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise StorageEndpointError(f"{url!r} is not a URL ({exc})") from exc
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise StorageEndpointError(
                f"{url!r} is not an http(s)://host[:port] URL, e.g. https://s3.example.com"
            )
        return cls(parts.scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[parts.scheme])

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def admits(self, url: str) -> bool:
        try:
            return StorageEndpoint.parse(url) == self
        except StorageEndpointError:
            return False


def grant_urls(request: CaptureRequest | HangDumpRequest) -> list[str]:
    """Every URL in the request's grants."""
    if isinstance(request, HangDumpRequest):
        grants: list[ArtifactGrant] = list(request.grants.values())
    else:
        grants = [g for r in request.grants for g in (r.trace, r.counters, r.summary, r.steps)]
    urls: list[str] = []
    for grant in grants:
        if grant.put_url is not None:
            urls.append(grant.put_url)
        if grant.multipart is not None:
            urls += [*grant.multipart.part_urls, grant.multipart.complete_url]
        if grant.post is not None:
            urls.append(grant.post.url)
    return urls


def check_grant_endpoints(
    request: CaptureRequest | HangDumpRequest, endpoint: StorageEndpoint
) -> None:
    """Raise ForeignGrantHost naming the first URL whose host is not `endpoint`."""
    for url in grant_urls(request):
        if not endpoint.admits(url):
            parts = urlsplit(url)
            raise ForeignGrantHost(
                f"grant URL host {parts.scheme}://{parts.netloc} is not the storage endpoint "
                f"{endpoint} ({STORAGE_ENDPOINT_ENV}); this agent uploads nowhere else"
            )
