"""The operator's blocking calls (the Kubernetes client, S3) and its CPU-bound walks over
a tenant's data, on threads its namespaces share in turn.

asyncio's default executor has min(32, cores + 4) threads, six on a two-core node, served
first come, first served: 63 sessions of one tenant, each listing pods, patching status and
reading S3 every poll, kept them busy, and another namespace's session took 26 s instead of 8
to end while it waited its place in line. Here each namespace has its own line
(`fair_share.FairPool`), so a call waits for at most one call of each other namespace with
calls waiting, and the Kubernetes client's connection pool is as large as the thread pool
(`kubeapi.load_api_client`), so no thread waits for a connection. Work that computes
rather than waits (attributing a hang over a tenant's dumps) has one thread of its own: two
such threads would finish no sooner, since each holds the GIL while it runs, and would take
the event loop's share of it twice over.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from stepscope_operator.fair_share import FairPool

Params = ParamSpec("Params")
Result = TypeVar("Result")

BLOCKING_THREADS = 16
# The owner of calls made for the operator itself, not for one namespace's objects.
OPERATOR = ""

_POOL = FairPool("stepscope-blocking", BLOCKING_THREADS)
_COMPUTE = FairPool("stepscope-compute", 1)


async def in_thread(
    namespace: str, call: Callable[Params, Result], *args: Params.args, **kwargs: Params.kwargs
) -> Result:
    """`call(*args, **kwargs)` on a blocking thread in `namespace`'s turn, as
    asyncio.to_thread runs it (with the caller's context variables)."""
    return await _run_on(_POOL, namespace, functools.partial(call, *args, **kwargs))


async def computed(
    namespace: str, call: Callable[Params, Result], *args: Params.args, **kwargs: Params.kwargs
) -> Result:
    """`call(*args, **kwargs)`, CPU-bound work on a tenant's data, on the one compute thread
    in `namespace`'s turn."""
    return await _run_on(_COMPUTE, namespace, functools.partial(call, *args, **kwargs))


async def _run_on(pool: FairPool, namespace: str, work: Callable[[], Result]) -> Result:
    context = contextvars.copy_context()
    return await asyncio.wrap_future(pool.submit(namespace, functools.partial(context.run, work)))
