"""The agent sidecar: one per pod, serving the operator over HTTP and the trainers over
the pod-local socket, and publishing finished windows to object storage.

Run as ``stepscope-agent``; configuration comes from the environment (sidecar_settings).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import statistics
import sys
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from stepscope.api.agent import (
    AgentStatus,
    CaptureFailure,
    CaptureRequest,
    CaptureState,
    CaptureStatus,
    RankStatus,
)
from stepscope.api.hang_dump import HangDumpRequest, PodHangDumps
from stepscope_agent import __version__, messages, settings
from stepscope_agent.captures import Capture, CaptureBook
from stepscope_agent.hang_dumps import HangDumps
from stepscope_agent.http_api import serve_http
from stepscope_agent.nvml_sampling import NvmlSampler
from stepscope_agent.publishing import FinishedWindow, publish_rank, remove_capture_folder
from stepscope_agent.registry import RankLink, RankRegistry
from stepscope_agent.sidecar_settings import SettingsError, SidecarSettings
from stepscope_agent.step_metrics import PodLabels, ScrapeCache, render_metrics

log = logging.getLogger("stepscope_agent")

# Publishing (gzip, analysis, upload) runs on at most this many ranks at once, so a pod
# with many ranks does not take the trainers' CPU all at once.
PUBLISH_WORKERS = 2
DEADLINE_CHECK_S = 1.0


class Agent:
    def __init__(self, config: SidecarSettings, publisher: Executor | None = None) -> None:
        self.config = config
        self.book = CaptureBook()
        self.sampler = NvmlSampler()
        # The scale harness shares one publisher among the many agents of its process.
        self._publisher = publisher or ThreadPoolExecutor(
            PUBLISH_WORKERS, thread_name_prefix="publish"
        )
        self._windows_open: dict[tuple[str, int], float] = {}
        self.outbox = Path(settings.outbox_dir(config.agent_dir))
        self.outbox.mkdir(parents=True, exist_ok=True)
        # Trainers often run as another user than the sidecar and write their traces here.
        with contextlib.suppress(OSError):  # not ours to change if a trainer made it first
            self.outbox.chmod(0o777)
        self.hang_dumps = HangDumps(config.pod, config.node, self.outbox / "hang-dumps")
        self.registry = RankRegistry(
            Path(settings.socket_path(config.agent_dir)), self._on_message, self._send_pending_arms
        )
        self._metric_labels = PodLabels.sanitised(
            namespace=config.namespace,
            job_kind=config.job_kind,
            job_name=config.job_name,
            pod=config.pod,
            node=config.node,
        )
        self._scrapes = ScrapeCache(self._render_metrics)

    # The operator's side (called from HTTP handler threads).

    def status(self) -> AgentStatus:
        ranks = []
        for link in self.registry.links():
            p = link.progress
            ranks.append(
                RankStatus(
                    rank=link.rank,
                    local_rank=link.local_rank,
                    pid=link.pid,
                    global_step=p.global_step if p else None,
                    step_time_ms=p.step_time_ms if p else None,
                    data_wait_ms=p.data_wait_ms if p else None,
                    last_step_at=p.last_step_at if p else None,
                    step_time_p95_ms=p.step_time_p95_ms if p else None,
                )
            )
        steps = [r.global_step for r in ranks if r.global_step is not None]
        times = [r.step_time_ms for r in ranks if r.step_time_ms is not None]
        return AgentStatus(
            pod=self.config.pod,
            namespace=self.config.namespace,
            node=self.config.node,
            ranks=ranks,
            current_step=max(steps, default=None),
            step_time_ms=statistics.median(times) if times else None,
            torch_version=next((link.torch_version for link in self.registry.links()), None),
            gpu_present=self.sampler.gpu_present,
            agent_time=time.time(),
            agent_version=__version__,
        )

    def metrics(self) -> bytes:
        """The Prometheus exposition of every rank's step telemetry (step_metrics)."""
        return self._scrapes.reply()

    def _render_metrics(self) -> bytes:
        return render_metrics(self._metric_labels, self.registry.links(), time.time())

    def arm(self, request: CaptureRequest) -> tuple[Capture, bool]:
        capture, created = self.book.arm(request)
        if created:
            log.info(
                "armed %s: steps %d..%d, tier %s, ranks %s",
                request.capture_id,
                request.start_step,
                request.end_step,
                request.tier.value,
                sorted(capture.ranks),
            )
            for link in self.registry.links():
                if link.rank in capture.ranks:
                    self._send_arm(link, request)
        return capture, created

    def hang_dump(self, request: HangDumpRequest) -> PodHangDumps:
        """Every trainer's stacks and collectives now (blocks up to the request's timeout)."""
        return self.hang_dumps.collect(self.registry.links(), request)

    def capture_status(self, capture_id: str) -> CaptureStatus | None:
        return self.book.status(capture_id)

    def cancel(self, capture_id: str) -> Capture | None:
        capture = self.book.cancel(capture_id)
        if capture is not None:
            for link in self.registry.links():
                link.send(messages.Cancel(capture_id=capture_id))
        return capture

    # The trainers' side (called from registry reader threads).

    def _send_pending_arms(self, link: RankLink) -> None:
        for capture in self.book.pending_for(link.rank):
            self._send_arm(link, capture.request)

    def _send_arm(self, link: RankLink, request: CaptureRequest) -> None:
        link.send(
            messages.Arm(
                capture_id=request.capture_id,
                start_step=request.start_step,
                steps=request.steps,
                warmup_steps=request.warmup_steps,
                tier=request.tier,
                trace=request.takes_trace(link.rank),
            )
        )

    def _on_message(self, link: RankLink, message: messages.Message | None) -> None:
        if message is None:
            self.book.rank_gone(link.rank, link.global_step)
        elif isinstance(message, messages.WindowStarted):
            self._windows_open[(message.capture_id, link.rank)] = time.time()
            self.book.update(
                message.capture_id,
                link.rank,
                state=CaptureState.CAPTURING,
                first_step=message.first_step,
            )
        elif isinstance(message, messages.WindowFailed):
            failure = CaptureFailure(
                code=message.code,
                message=message.message,
                reached_step=message.reached_step,
                start_step=message.start_step,
            )
            self.book.update(
                message.capture_id,
                link.rank,
                state=CaptureState.FAILED,
                failure=failure,
                reason=failure.message,
            )
        elif isinstance(message, messages.WindowFinished):
            self._window_finished(link, message)
        elif isinstance(message, messages.HangDumpTaken):
            self.hang_dumps.received(link, message)
        self._sample_if_capturing()

    def _window_finished(self, link: RankLink, message: messages.WindowFinished) -> None:
        capture_id = message.capture_id
        capture = self.book.update(
            capture_id,
            link.rank,
            state=CaptureState.UPLOADING,
            first_step=message.first_step,
            last_step=message.last_step,
            steps_captured=len(message.steps),
            export_stall_ms=message.export_stall_ms,
        )
        trace_file = Path(message.trace_file) if message.trace_file else None
        if capture is None:  # cancelled or expired meanwhile: nothing to publish
            if trace_file is not None:
                trace_file.unlink(missing_ok=True)
            return
        opened = self._windows_open.pop((capture_id, link.rank), time.time())
        samples = self.sampler.samples_between(opened - 0.2, time.time())
        artifacts = FinishedWindow(
            rank=link.rank,
            pid=link.pid,
            first_step=message.first_step,
            last_step=message.last_step,
            steps=message.steps,
            trace_file=trace_file,
            export_stall_ms=message.export_stall_ms,
        )
        self._publisher.submit(self._publish, capture, artifacts, samples)

    def _publish(self, capture: Capture, artifacts: FinishedWindow, samples: list) -> None:
        request = capture.request
        folder = self.outbox / request.capture_id
        result = publish_rank(request, artifacts, samples, folder / f"rank-{artifacts.rank}.work")
        state = CaptureState.DONE if result.ok else CaptureState.FAILED
        self.book.update(
            request.capture_id,
            artifacts.rank,
            state=state,
            bytes_uploaded=result.bytes_uploaded,
            artifact_keys=result.artifact_keys,
            summary=result.summary,
            failure=result.failure,
            reason=result.reason,
        )
        if self.book.finished(request.capture_id):
            remove_capture_folder(folder)
        log.info(
            "capture %s rank %d %s%s",
            request.capture_id,
            artifacts.rank,
            state.value,
            f": {result.reason}" if result.reason else "",
        )

    def _sample_if_capturing(self) -> None:
        self.sampler.sample_while(self.book.capturing())

    def watch_deadlines(self) -> None:
        while True:
            time.sleep(DEADLINE_CHECK_S)
            self.book.expire(datetime.now(UTC))
            self._sample_if_capturing()


def main(argv: list[str] | None = None) -> int:
    try:
        config = SidecarSettings.from_env()
    except (SettingsError, ValueError, OSError) as error:
        print(f"stepscope-agent: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config.agent_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(config)
    agent.registry.serve_in_background()
    threading.Thread(target=agent.watch_deadlines, name="deadlines", daemon=True).start()
    server = serve_http(agent, config)
    log.info(
        "stepscope agent %s on %s:%d, pod %s, socket %s",
        __version__,
        config.host,
        server.server_address[1],
        config.pod,
        settings.socket_path(config.agent_dir),
    )
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    finally:
        server.server_close()
        agent.registry.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
