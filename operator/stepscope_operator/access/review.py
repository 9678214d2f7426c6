"""Who is calling, and may they read this session: a TokenReview and a SubjectAccessReview.

The artifact endpoint makes no access decision of its own. The API server authenticates the
caller's bearer token (TokenReview) and the cluster's authorizer answers whether that user may
``get`` the ProfileSession (SubjectAccessReview), so artifact access is exactly RBAC, or
whatever authorizer the cluster runs, with the groups and extra attributes the API server
itself would use.

The TokenReview names the endpoint's own audience (``artifacts_token_audience``), and a
token counts only when the answer lists that audience back: an authenticator that does not
check audiences answers without any, and a token issued for the API server (every pod's
service-account token) is refused. So a token the endpoint takes is one its owner made for
it, and one sent to it is no use against the API server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from stepscope.api.session import GROUP
from stepscope_operator.kubeapi import SESSION_PLURAL
from stepscope_operator.threads import OPERATOR, in_thread


@dataclass(frozen=True)
class Caller:
    """An authenticated user, as the API server's TokenReview describes them."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def session_get_review(caller: Caller, namespace: str, name: str) -> dict[str, Any]:
    """The SubjectAccessReview asking whether `caller` may get the named session."""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": caller.username,
            "uid": caller.uid,
            "groups": list(caller.groups),
            "extra": caller.extra,
            "resourceAttributes": {
                "group": GROUP,
                "resource": SESSION_PLURAL,
                "verb": "get",
                "namespace": namespace,
                "name": name,
            },
        },
    }


def token_review(token: str, audience: str) -> dict[str, Any]:
    """The TokenReview asking whether `token` is valid for `audience`."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [audience]},
    }


def caller_from_review(answer: dict[str, Any], audience: str) -> Caller | None:
    """The caller a TokenReview answer names, or None when the token was not accepted for
    `audience` (the answer must list it: one without audiences came from an authenticator
    that did not check them, and means only "valid for the API server")."""
    status = answer.get("status") or {}
    user = status.get("user") or {}
    if not status.get("authenticated") or not user.get("username"):
        return None
    if audience not in (status.get("audiences") or ()):
        return None
    return Caller(
        username=user["username"],
        uid=user.get("uid") or "",
        groups=tuple(user.get("groups") or ()),
        extra={k: list(v) for k, v in (user.get("extra") or {}).items()},
    )


class AccessReviews:
    """TokenReviews and SubjectAccessReviews through the real API server, off the event loop."""

    def __init__(self, api_client: k8s.ApiClient, audience: str) -> None:
        self._authentication = k8s.AuthenticationV1Api(api_client)
        self._authorization = k8s.AuthorizationV1Api(api_client)
        self.audience = audience

    async def authenticate(self, token: str) -> Caller | None:
        response = await in_thread(
            OPERATOR,
            self._authentication.create_token_review,
            token_review(token, self.audience),
            _preload_content=False,
        )
        return caller_from_review(json.loads(response.data), self.audience)

    async def may_get_session(self, caller: Caller, namespace: str, name: str) -> Verdict:
        response = await in_thread(
            namespace,
            self._authorization.create_subject_access_review,
            session_get_review(caller, namespace, name),
            _preload_content=False,
        )
        status = json.loads(response.data).get("status") or {}
        return Verdict(bool(status.get("allowed")), status.get("reason") or "")
