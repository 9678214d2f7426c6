"""The sidecar's side of a hang dump: ask every trainer in the pod, wait a bounded time,
validate what came back, store the full dumps and answer the operator with digests.

A trainer whose Python cannot run (a C extension holding the GIL forever, a process
stopped by a signal) never answers. The sidecar says so in a ``RankDump`` with
``answered: false`` and what it saw itself: the last step the rank reported and when.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from pathlib import Path

from pydantic import ValidationError

from stepscope.api.hang_dump import (
    MAX_DUMP_BYTES,
    HangDumpRequest,
    PodHangDumps,
    RankDump,
)
from stepscope_agent import messages
from stepscope_agent.registry import RankLink
from stepscope_agent.uploading import UploadError, upload_file

log = logging.getLogger(__name__)


class HangDumps:
    """Pending dump requests by (request id, rank); answers arrive on registry threads."""

    def __init__(self, pod: str, node: str | None, work_dir: Path) -> None:
        self._pod = pod
        self._node = node
        self._work_dir = work_dir
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, int], threading.Event] = {}
        self._answers: dict[tuple[str, int], RankDump | str] = {}

    def received(self, link: RankLink, message: messages.HangDumpTaken) -> None:
        """A trainer's answer (called on its registry thread)."""
        key = (message.request_id, link.rank)
        with self._lock:
            if key not in self._waiting:
                return  # late, after the request gave up on it
            self._answers[key] = self._validated(link, message.dump)
            self._waiting[key].set()

    def _validated(self, link: RankLink, raw: dict) -> RankDump | str:
        if len(json.dumps(raw)) > MAX_DUMP_BYTES:
            return f"rank {link.rank}'s dump is larger than {MAX_DUMP_BYTES} bytes"
        try:
            dump = RankDump.model_validate(raw)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return f"rank {link.rank}'s dump is not valid at {where}: {first['msg']}"
        # The sidecar, not the trainer, says which rank, pod and node a connection is.
        return dump.model_copy(update={"rank": link.rank, "pod": self._pod, "node": self._node})

    def collect(self, links: list[RankLink], request: HangDumpRequest) -> PodHangDumps:
        """Ask every linked trainer, wait up to the request's timeout, store and answer."""
        keys = {link.rank: (request.request_id, link.rank) for link in links}
        with self._lock:
            for key in keys.values():
                self._waiting[key] = threading.Event()
        for link in links:
            link.send(messages.DumpStacks(request_id=request.request_id))
        deadline = time.monotonic() + request.timeout_seconds
        for key in keys.values():
            self._waiting[key].wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            answers = {rank: self._answers.pop(key, None) for rank, key in keys.items()}
            for key in keys.values():
                self._waiting.pop(key, None)
        reply = PodHangDumps(pod=self._pod, node=self._node)
        for link in links:
            dump = answers[link.rank]
            if not isinstance(dump, RankDump):
                dump = self._unanswered(link, request.timeout_seconds, dump)
                reply.notes.append(dump.notes[0])
            self._store(dump, request, reply)
            reply.ranks.append(dump.digest())
        if not links:
            reply.notes.append("no trainer process is connected to this sidecar")
        reply.notes[:] = reply.notes[:8]
        return reply

    def _unanswered(self, link: RankLink, timeout_s: float, why: str | None) -> RankDump:
        progress = link.progress
        last = progress.last_step_at if progress else None
        seen = f"; its last step ended {time.time() - last:.0f}s ago" if last else ""
        note = why or (
            f"rank {link.rank} (pid {link.pid}) did not answer within {timeout_s:g}s: its "
            f"Python is not running (the GIL held, or the process stopped){seen}"
        )
        return RankDump(
            rank=link.rank,
            pid=link.pid,
            pod=self._pod,
            node=self._node,
            answered=False,
            step=progress.global_step if progress else None,
            last_step_at=last,
            dumped_at=time.time(),
            notes=[note],
        )

    def _store(self, dump: RankDump, request: HangDumpRequest, reply: PodHangDumps) -> None:
        grant = request.grants.get(dump.rank)
        if grant is None:
            return
        self._work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=self._work_dir, suffix=".json", delete=False
        ) as file:
            file.write(dump.model_dump_json(by_alias=True, indent=1))
        path = Path(file.name)
        try:
            upload_file(path, grant)
            reply.stored.append(grant.key)
        except UploadError as error:
            reply.notes.append(f"rank {dump.rank}'s dump not stored: {error}"[:300])
            log.warning("hang dump of rank %d not stored: %s", dump.rank, error)
        finally:
            path.unlink(missing_ok=True)
