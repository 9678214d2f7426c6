"""Record the README's trigger example from a real run: a ProfileTrigger fires on a real job.

The platform is `make demo`'s real node (``demo_node``): containerd, runc and a kubelet, the
Kubeflow training operator, and the stepscope operator from its image through the chart, whose
webhook injects the agents. The job is a 4-rank DDP PyTorchJob (a master and three workers)
running tests/e2e/ddp_job.py, the e2e trigger test's job, whose knob file (a host directory
mounted into every trainer) says how many milliseconds of extra matrix products each step
does. The trigger is ``TRIGGER``: it watches the job every 5 s. Once its band is warm, the
trigger records a baseline of the healthy job; once that has succeeded and the band has held the
job for a few more samples, the knob goes from 0 to ``EXTRA_COMPUTE_MS``; the run then waits for
the trigger to open a session, for that session to finish, for the trigger's verdict against the
baseline (a BaselineCompared Event), and for the cooldown to hold the next firing.

Throughout, every agent's ``/metrics`` is scraped every ``SCRAPE_INTERVAL_S`` seconds, as
Prometheus scrapes it; the step-duration histogram's ``_sum`` and ``_count`` of every rank are
kept (``metrics.csv``), from which the chart's dashboard draws its per-rank step time. At the
end, what a user reads is printed by real kubectl and kept as printed: ``kubectl get
profiletriggers``, ``kubectl describe`` of the trigger and of the session it opened, and the
trigger's Events as JSON (their times). `trigger_example` renders the README's section and the
plot from these files; nothing in them is edited.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import re
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepscope_agent.step_metrics import STEP_DURATION
from stepscope_operator.agents.contract import AGENT_CONTAINER_NAME, AGENT_PORT_NAME
from stepscope_operator.targets.kinds.pytorchjob import JOB_NAME_LABEL
from stepscope_operator.triggers.opening import REASON_ANNOTATION, TRIGGER_LABEL

from stepscope.api.session import API_VERSION
from stepscope.api.trigger import TriggerEventReason, TriggerReason
from stepscope_dev import build
from stepscope_dev.api_reads import object_path
from stepscope_dev.cluster import start_cluster, stop_cluster
from stepscope_dev.demojob import demo_job_manifest, job_pods_running
from stepscope_dev.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB_SCRIPT = REPO_ROOT / "tests" / "e2e" / "ddp_job.py"
NAMESPACE = "default"
JOB = "ddp"
TRIGGER = "ddp-trigger"
SCRIPT_CONFIG_MAP = "ddp-trainer"
KNOB = "extra-compute-ms"
KNOB_MOUNT = "/var/run/ddp-knobs"
# The e2e trigger test's job: a 10 ms sleep a step, so that with 40 ms more compute a step
# (four ranks' products sharing two cores) the step is mostly compute and the session's own
# verdict names it; the step grows several times over, far outside the band. (The e2e test
# adds 80 ms, for a wider margin under the analysis's rule of a fifth; its docstring says why.)
EXTRA_COMPUTE_MS = 40
TRAINER_ARGS = ("--steps", "100000", "--step-sleep", "0.01")
SCRAPE_INTERVAL_S = 2.5
# Four trainers load torch from the host beside their agents on two loaded cores.
PODS_TIMEOUT_S = 420.0
WARM_TIMEOUT_S = 240.0
BASELINE_TIMEOUT_S = 300.0
FIRE_TIMEOUT_S = 180.0
SESSION_TIMEOUT_S = 600.0
COOLDOWN_TIMEOUT_S = 90.0
FINAL_PHASES = ("Succeeded", "PartiallySucceeded", "Failed")

# The files of one recording, in its folder.
GET_FILE = "get-profiletriggers.txt"
TRIGGER_FILE = "describe-profiletrigger.txt"
SESSION_FILE = "describe-profilesession.txt"
EVENTS_FILE = "trigger-events.json"
METRICS_FILE = "metrics.csv"
RUN_FILE = "run.json"
METRICS_COLUMNS = ("time", "pod", "rank", f"{STEP_DURATION}_sum", f"{STEP_DURATION}_count")

# The trigger as the README shows it: the e2e test's, a short band for a run of minutes.
TRIGGER_MANIFEST: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ProfileTrigger",
    "metadata": {"name": TRIGGER, "namespace": NAMESPACE},
    "spec": {
        "jobs": {"kind": "pytorchJob", "names": [JOB]},
        "intervalSeconds": 5,
        "rules": {"stepTimeBand": {"window": 10, "warmupSamples": 5, "consecutive": 2}},
        "limits": {"cooldownSeconds": 600},
        "sessionTemplate": {
            "granularity": "ops",
            # 20 steps: enough blocks a side for the comparison's test to reach p < 0.01.
            "window": {"steps": 20, "warmupSteps": 1, "leadSeconds": 2, "timeoutSeconds": 120},
        },
    },
}

_SERIES = re.compile(rf"^({STEP_DURATION}_(?:sum|count))\{{(.*)\}} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def job_manifest(node: Any, knob_dir: Path) -> dict[str, Any]:
    """The demo's PyTorchJob running ddp_job.py with the knob, as the real node runs it: the
    agents left to the chart's webhook, the trainer on the node's trainer image."""
    from stepscope_dev.demo_node import real_node_job

    job = demo_job_manifest(name=JOB)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        trainer = next(c for c in spec["containers"] if c["name"] == "pytorch")
        knob = f"{KNOB_MOUNT}/{KNOB}"
        trainer["command"] = [
            "python", f"/workspace/{JOB_SCRIPT.name}", *TRAINER_ARGS, "--extra-compute-file", knob
        ]  # fmt: skip
        trainer.setdefault("env", []).append({"name": "OMP_NUM_THREADS", "value": "1"})
        trainer["volumeMounts"].append({"name": "knobs", "mountPath": KNOB_MOUNT, "readOnly": True})
        for volume in spec["volumes"]:
            if "configMap" in volume:
                volume["configMap"] = {"name": SCRIPT_CONFIG_MAP}
        spec["volumes"].append(
            {"name": "knobs", "hostPath": {"path": str(knob_dir), "type": "Directory"}}
        )
    return real_node_job(job, node)


def write_knob(knob_dir: Path, milliseconds: int) -> None:
    """Whole or not at all: every trainer reads the file every step."""
    partial = knob_dir / f"{KNOB}.partial"
    partial.write_text(str(milliseconds))
    partial.chmod(0o644)
    partial.replace(knob_dir / KNOB)


def parse_step_duration(text: str) -> dict[int, dict[str, float]]:
    """Each rank's step-duration ``_sum`` and ``_count`` from one ``/metrics`` reply."""
    ranks: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        if match := _SERIES.match(line):
            labels = dict(_LABEL.findall(match[2]))
            ranks.setdefault(int(labels["rank"]), {})[match[1]] = float(match[3])
    return ranks


class Scraper(threading.Thread):
    """Scrapes every agent of the job every SCRAPE_INTERVAL_S seconds, as Prometheus would."""

    def __init__(self, targets: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.targets = targets  # pod name -> metrics URL
        self.rows: list[tuple[float, str, int, float, float]] = []
        self.failures: list[str] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            for pod, url in sorted(self.targets.items()):
                try:
                    with urllib.request.urlopen(url, timeout=2) as reply:
                        text = reply.read().decode()
                except OSError as exc:
                    self.failures.append(f"{pod}: {exc}")
                    continue
                now = round(time.time(), 3)
                for rank, values in sorted(parse_step_duration(text).items()):
                    total = values.get(f"{STEP_DURATION}_sum")
                    count = values.get(f"{STEP_DURATION}_count")
                    if total is not None and count is not None:
                        self.rows.append((now, pod, rank, total, count))
            self._stopping.wait(max(0.0, SCRAPE_INTERVAL_S - (time.monotonic() - began)))

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)


def metrics_targets(cluster: Any) -> dict[str, str]:
    """Each of the job's pods and its agent's /metrics URL (the port named in its spec)."""
    pods = json.loads(
        cluster.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", f"{JOB_NAME_LABEL}={JOB}", "-o", "json"
        ).stdout
    )["items"]
    targets = {}
    for pod in pods:
        agent = next(
            c for c in pod["spec"].get("initContainers", []) if c["name"] == AGENT_CONTAINER_NAME
        )
        port = next(p["containerPort"] for p in agent["ports"] if p["name"] == AGENT_PORT_NAME)
        targets[pod["metadata"]["name"]] = f"http://{pod['status']['podIP']}:{port}/metrics"
    return targets


def _trigger(cluster: Any) -> dict[str, Any]:
    trigger = cluster.get_json(object_path("profiletriggers", NAMESPACE, TRIGGER))
    if trigger is None:
        raise RuntimeError(f"ProfileTrigger {NAMESPACE}/{TRIGGER} is gone")
    return trigger


def _ready_message(cluster: Any) -> str:
    conditions = (_trigger(cluster).get("status") or {}).get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "Ready"), "")


def _opened(cluster: Any, fired: bool) -> list[dict[str, Any]]:
    """The sessions the trigger opened on evidence (`fired`), or the baselines it recorded."""
    uid = _trigger(cluster)["metadata"]["uid"]
    out = cluster.kubectl(
        "get", "profilesessions", "-n", NAMESPACE, "-l", f"{TRIGGER_LABEL}={uid}", "-o", "json"
    )
    return [
        s
        for s in json.loads(out.stdout)["items"]
        if (REASON_ANNOTATION in (s["metadata"].get("annotations") or {})) == fired
    ]


def _wait_final(cluster: Any, name: str) -> str:
    """Wait for the session to finish; its phase."""
    return wait_until(
        lambda: (
            phase
            if (phase := (_session(cluster, name).get("status") or {}).get("phase")) in FINAL_PHASES
            else None
        ),
        SESSION_TIMEOUT_S,
        f"session {name} to finish",
        2.0,
    )


def _told(cluster: Any, reason: str) -> bool:
    return any(e["reason"] == reason for e in trigger_events(cluster))


def trigger_events(cluster: Any) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "events", "-n", NAMESPACE, "-o", "json",
        f"--field-selector=involvedObject.kind=ProfileTrigger,involvedObject.name={TRIGGER}",
    )  # fmt: skip
    return json.loads(out.stdout)["items"]


def event_time(event: dict[str, Any]) -> str:
    return event.get("eventTime") or event.get("firstTimestamp") or event["lastTimestamp"]


def machine() -> str:
    """The machine in words: cores, architecture, and whether it runs under a hypervisor."""
    flags = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = next(
            (line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), ""
        )
    kind = "VM" if " hypervisor" in flags else "machine"
    return f"{os.cpu_count()}-core {platform.machine()} {kind}"


def play(cluster: Any, node: Any, knob_dir: Path) -> dict[str, Any]:
    """The scenario on a started platform; what it recorded, outputs by file name."""
    cluster.kubectl(
        "create", "configmap", SCRIPT_CONFIG_MAP, "-n", NAMESPACE,
        f"--from-file={JOB_SCRIPT.name}={JOB_SCRIPT}",
    )  # fmt: skip
    write_knob(knob_dir, 0)
    say(f"submitting the 4-rank PyTorchJob {JOB} (tests/e2e/ddp_job.py, knob at 0 ms)")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(node, knob_dir)))
    wait_until(
        lambda: job_pods_running(cluster, NAMESPACE, JOB), PODS_TIMEOUT_S, "4 running pods", 2.0
    )
    scraper = Scraper(metrics_targets(cluster))
    scraper.start()
    try:
        say(f"applying the ProfileTrigger {TRIGGER}")
        cluster.kubectl("apply", "-f", "-", input=json.dumps(TRIGGER_MANIFEST))
        wait_until(lambda: "in band" in _ready_message(cluster), WARM_TIMEOUT_S, "a warm band", 1.0)
        (baseline,) = wait_until(
            lambda: _opened(cluster, fired=False), BASELINE_TIMEOUT_S, "a baseline session", 1.0
        )
        baseline_name = baseline["metadata"]["name"]
        say(f"the trigger recorded the baseline {baseline_name}; waiting for it to finish")
        if (phase := _wait_final(cluster, baseline_name)) != "Succeeded":
            raise RuntimeError(f"the baseline {baseline_name} ended {phase}")
        # A whole band window of samples after the baseline, so that the band the firing
        # states is of the job unprofiled (the baseline's capture slows a few steps).
        spec = TRIGGER_MANIFEST["spec"]
        time.sleep(spec["rules"]["stepTimeBand"]["window"] * spec["intervalSeconds"])
        if _opened(cluster, fired=True):
            raise RuntimeError("the trigger opened a session while the job was healthy")
        say(f"band warm ({_ready_message(cluster)}); adding {EXTRA_COMPUTE_MS} ms of compute")
        write_knob(knob_dir, EXTRA_COMPUTE_MS)
        knob_at, load = time.time(), os.getloadavg()[0]
        (session,) = wait_until(
            lambda: _opened(cluster, fired=True), FIRE_TIMEOUT_S, "the trigger to fire", 1.0
        )
        name = session["metadata"]["name"]
        say(f"the trigger opened {name}; waiting for it to finish")
        _wait_final(cluster, name)
        for reason, what in (
            (TriggerEventReason.BASELINE_COMPARED, "the verdict against the baseline"),
            (TriggerEventReason.COOLING_DOWN, "the cooldown to hold a firing"),
        ):
            wait_until(lambda r=reason: _told(cluster, r), COOLDOWN_TIMEOUT_S, what, 2.0)
    finally:
        scraper.stop()
    events = trigger_events(cluster)
    fired = next(e for e in events if e["reason"] == TriggerReason.STEP_TIME_OUT_OF_BAND)
    return {
        GET_FILE: cluster.kubectl("get", "profiletriggers", "-n", NAMESPACE).stdout,
        TRIGGER_FILE: cluster.kubectl(
            "describe", "profiletrigger", TRIGGER, "-n", NAMESPACE
        ).stdout,
        SESSION_FILE: cluster.kubectl("describe", "profilesession", name, "-n", NAMESPACE).stdout,
        EVENTS_FILE: [
            {k: e.get(k) for k in ("type", "reason", "message", "count")} | {"time": event_time(e)}
            for e in sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))
        ],
        METRICS_FILE: scraper.rows,
        RUN_FILE: {
            "command": "python -m stepscope_dev.trigger_example --record",
            "machine": machine(),
            "recordedAt": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "trigger": TRIGGER_MANIFEST,
            "job": {"kind": "PyTorchJob", "name": JOB, "ranks": 4, "args": list(TRAINER_ARGS)},
            "extraComputeMs": EXTRA_COMPUTE_MS,
            # What else the machine ran when the compute was added, and this run's niceness,
            # which the trainers inherit: both stretch the added products on the wall.
            "loadAverage": round(load, 1),
            "nice": os.nice(0),
            "knobAt": round(knob_at, 3),
            "firedAt": event_time(fired),
            "session": name,
            "baselineSession": baseline_name,
            "scrapeIntervalSeconds": SCRAPE_INTERVAL_S,
            "scrapeFailures": len(scraper.failures),
        },
    }


def _session(cluster: Any, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "profilesession", name, "-n", NAMESPACE, "-o", "json")
    return json.loads(out.stdout)


def write_recording(recorded: dict[str, Any], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in (GET_FILE, TRIGGER_FILE, SESSION_FILE):
        (folder / name).write_text(recorded[name], encoding="utf-8")
    for name in (EVENTS_FILE, RUN_FILE):
        (folder / name).write_text(json.dumps(recorded[name], indent=1) + "\n", encoding="utf-8")
    with (folder / METRICS_FILE).open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(METRICS_COLUMNS)
        writer.writerows(recorded[METRICS_FILE])


def record(folder: Path) -> None:
    """Run the scenario on a real node started for it and write its recording to ``folder``."""
    from stepscope_dev.demo_node import start_demo_node

    started = time.monotonic()
    bin_dir = build.ensure_node_binaries()
    knob_dir = Path(tempfile.mkdtemp(prefix="stepscope-trigger-knobs-"))
    # The trainers run as their image's non-root user: the knob must be readable to them.
    knob_dir.chmod(0o755)
    with tempfile.TemporaryDirectory(prefix="stepscope-trigger-run-") as root:
        say("starting the local control plane and S3")
        cluster = start_cluster(Path(root), bin_dir, die_with_parent=True, real_node=True)
        try:
            demo_node = start_demo_node(cluster, say)
            recorded = play(cluster, demo_node.node, knob_dir)
        finally:
            stop_cluster(cluster)
            for path in knob_dir.iterdir():
                path.unlink()
            knob_dir.rmdir()
    write_recording(recorded, folder)
    say(f"recorded in {time.monotonic() - started:.0f}s: {folder.relative_to(REPO_ROOT)}")
