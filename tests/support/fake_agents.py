"""Stand-ins for agents in the operator's unit tests: aiohttp servers that do not verify calls,
but name the pod each call was signed for in every reply, as an honest agent names its own
(the operator's client refuses a reply that names another pod, or none)."""

from __future__ import annotations

from aiohttp import web

from stepscope.api.agent import SERVED_BY_HEADER, TARGET_HEADER


def answering_as_called(app: web.Application) -> web.Application:
    """`app`, whose every reply (streamed ones too) names the pod its call was signed for."""

    async def name_the_pod(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[SERVED_BY_HEADER] = request.headers.get(TARGET_HEADER, "")

    app.on_response_prepare.append(name_the_pod)
    return app


def called_pod(request: web.Request) -> str:
    """The name of the pod a call was signed for (its target is ``namespace/pod/uid``)."""
    return request.headers[TARGET_HEADER].split("/")[1]
