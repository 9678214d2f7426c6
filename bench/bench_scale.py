"""One session end to end at N ranks: the operator's fan-out, timings, memory and status size.

A real API server, S3 and controller manager (the local control plane); N/8 pods as real
API objects, each with the real agent sidecar serving on its own loopback address beside
8 simulated trainer ranks (stepscope_dev.agent_fleet: many sidecars in this process); and
the real operator process, started afresh for each N so its peak RSS is that session's.
Each N prints one JSON line:

* ``probe_arm_seconds``: from the session entering Planning to Armed (probe, plan, grants,
  arm every agent), as seen by polling its status every 0.1 s.
* ``window_end_to_verdict_seconds``: from the last rank ending the window to the session's
  final phase.
* ``operator_peak_rss_mib``: the operator process's VmHWM at the end.
* ``status_bytes``: the session's status as JSON.
* ``api_requests``: requests the API server counted (apiserver_request_total) during the
  session, less this benchmark's own status polls (the controller manager's are in it);
  ``api_writes``: writes to sessions, events and pods among them, by verb and resource.
* ``merged_trace_bytes`` and ``straggler_found``: null for now: the fleet's ranks take the
  steps tier (step timings, no trace), so there is no merged trace and no collective to
  find a straggler at. Traces from the recorded scenarios, perturbed per rank, are the next
  step (issue 11, part 6).

The last line has the growth ratios largest N / smallest N for time and memory.

    python bench/bench_scale.py [--ranks 8,128] [--stop-agents 0] [--timeout 300]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from stepscope_dev.agent_fleet import pod_manifest, running_status, start_pod
from stepscope_dev.build import ensure_binaries
from stepscope_dev.cluster import start_cluster, stop_cluster
from stepscope_dev.net import free_port
from stepscope_dev.operator_process import REPO_ROOT, OperatorProcess, operator_env
from stepscope_operator.call_signing import AgentKeyring

# The operator signs its agent calls with this keyring; the fleet trusts its public keys.
KEYRING = AgentKeyring.generate()
RANKS_PER_POD = 8
# Beyond this the fleet's threads, not the operator, set the pace (docs/benchmarks.md).
MAX_FLEET_RANKS = 256
FINAL = ("Succeeded", "PartiallySucceeded", "Failed")
_WRITES = {"POST", "PUT", "PATCH", "DELETE"}
_OPERATOR_WRITES = {"profilesessions", "events", "pods"}
_REQUESTS = re.compile(r"^apiserver_request_total\{([^}]*)\} (\d+(?:\.\d+)?)", re.MULTILINE)


def api_request_counts(api: k8s.ApiClient) -> Counter:
    """Requests the API server has answered so far, by verb, from its own metrics."""
    body = api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    counts: Counter = Counter()
    for labels, value in _REQUESTS.findall(body.data.decode()):
        verb = re.search(r'verb="([A-Z]+)"', labels)
        resource = re.search(r'resource="([a-z]*)"', labels)
        key = f"{verb.group(1) if verb else '?'} {resource.group(1) if resource else ''}"
        counts[key] += int(float(value))
    return counts


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def run_one(cluster, api: k8s.ApiClient, ranks: int, stop_agents: int, timeout: float, root: Path):
    core = k8s.CoreV1Api(api)
    custom = k8s.CustomObjectsApi(api)
    namespace = f"scale-{ranks}"
    core.create_namespace({"metadata": {"name": namespace}})
    pods_n = max(1, ranks // RANKS_PER_POD)
    per_pod = ranks // pods_n
    port = free_port()
    trusted, endpoint = KEYRING.trusted_keys_text(), cluster.s3_endpoint
    names = [f"train-worker-{i}" for i in range(pods_n)]
    for index, name in enumerate(names):
        core.create_namespaced_pod(namespace, pod_manifest(name, "train", index, per_pod))
    fleet = [
        start_pod(n, i, per_pod, ranks, root / namespace, port, trusted, endpoint, namespace)
        for i, n in enumerate(names)
    ]
    for pod in fleet:
        core.patch_namespaced_pod_status(pod.name, namespace, {"status": running_status(pod.ip)})
    operator = OperatorProcess(
        operator_env(
            cluster,
            KEYRING,
            STEPSCOPE_AGENT_PORT=str(port),
            STEPSCOPE_PLAN_MIN_STEPS="5",
            STEPSCOPE_POLL_INTERVAL_SECONDS="0.5",
            STEPSCOPE_MAX_RANKS_PER_SESSION=str(max(1024, ranks)),
        ),
        root / f"operator-{ranks}.log",
        die_with_parent=True,
    )
    operator.start()
    try:
        return _profile(custom, api, namespace, ranks, fleet, stop_agents, timeout, operator)
    finally:
        operator.stop()
        for pod in fleet:
            pod.stop()
        core.delete_namespace(namespace)


def _profile(custom, api, namespace, ranks, fleet, stop_agents, timeout, operator) -> dict:
    session = {
        "apiVersion": "stepscope.dev/v1alpha1",
        "kind": "ProfileSession",
        "metadata": {"name": "scale", "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "train"}}},
            "granularity": "steps",
            "window": {
                "steps": 5,
                "warmupSteps": 0,
                "leadSeconds": 2,
                "timeoutSeconds": int(timeout),
            },
        },
    }
    requests_before = api_request_counts(api)
    polls = 0
    seen: dict[str, float] = {}
    custom.create_namespaced_custom_object(
        "stepscope.dev", "v1alpha1", namespace, "profilesessions", session
    )
    deadline = time.monotonic() + timeout + 60
    status: dict = {}
    stopped = False
    while time.monotonic() < deadline:
        body = custom.get_namespaced_custom_object(
            "stepscope.dev", "v1alpha1", namespace, "profilesessions", "scale"
        )
        polls += 1
        status = body.get("status") or {}
        phase = status.get("phase")
        if phase and phase not in seen:
            seen[phase] = time.time()
        if phase == "Capturing" and stop_agents and not stopped:
            for pod in fleet[:stop_agents]:
                pod.stop_agent()
            stopped = True
        if phase in FINAL:
            break
        time.sleep(0.1)
    requests = api_request_counts(api)
    requests.subtract(requests_before)
    # This benchmark's own status polls and the metrics read itself are GETs.
    requests["GET profilesessions"] -= polls
    requests["GET "] -= 1
    # Writes to what the operator writes (the namespace controller's clean-up of the
    # previous size's namespace is in the totals, and is left out here).
    written = {
        key: n
        for key, n in requests.items()
        if n and key.split()[0] in _WRITES and key.split()[-1] in _OPERATOR_WRITES
    }
    final = next((p for p in FINAL if p in seen), None)
    window_end = max((r.finished_at or 0.0 for pod in fleet for r in pod.ranks), default=0.0)
    return {
        "ranks": ranks,
        "pods": len(fleet),
        "phase": final,
        "missing": (status.get("ranks") or {}).get("missingRanges"),
        "failed": (status.get("ranks") or {}).get("failedRanges"),
        "first_failure": next(iter((status.get("ranks") or {}).get("failed") or []), None),
        "probe_arm_seconds": _between(seen, "Planning", "Armed"),
        "window_end_to_verdict_seconds": (
            round(seen[final] - window_end, 2) if final and window_end else None
        ),
        "operator_peak_rss_mib": peak_rss_mib(operator.pid),
        "status_bytes": len(json.dumps(status).encode()),
        "merged_trace_bytes": None,
        "api_requests": sum(requests.values()),
        "api_writes": sum(written.values()),
        "api_writes_by_resource": written,
        "straggler_found": None,
    }


def _between(seen: dict[str, float], first: str, then: str) -> float | None:
    if first in seen and then in seen:
        return round(seen[then] - seen[first], 2)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,128", help="comma-separated rank counts")
    parser.add_argument("--stop-agents", type=int, default=0, help="pods whose agent stops")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per session")
    parser.add_argument("--force", action="store_true", help=f"allow more than {MAX_FLEET_RANKS}")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.ranks.split(",")]
    if max(sizes) > MAX_FLEET_RANKS and not args.force:
        parser.error(
            f"--ranks {max(sizes)}: the agent fleet runs two threads per simulated rank, which "
            f"past {MAX_FLEET_RANKS} ranks overloads a 2-core machine (docs/benchmarks.md); "
            "pass --force to try anyway"
        )
    with tempfile.TemporaryDirectory(prefix="stepscope-scale-") as tmp:
        root = Path(tmp)
        cluster = start_cluster(root / "cluster", ensure_binaries(), die_with_parent=True)
        try:
            cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
            cluster.kubectl(
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/profilesessions.stepscope.dev",
            )
            api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
            lines = []
            for ranks in sizes:
                line = run_one(cluster, api, ranks, args.stop_agents, args.timeout, root)
                lines.append(line)
                print(json.dumps(line), flush=True)
        finally:
            stop_cluster(cluster)
    if len(lines) > 1:
        small, large = lines[0], lines[-1]
        print(json.dumps(_growth(small, large)), flush=True)
    return 0 if all(line["phase"] in ("Succeeded", "PartiallySucceeded") for line in lines) else 1


def _growth(small: dict, large: dict) -> dict:
    def ratio(key: str) -> float | None:
        if small.get(key) and large.get(key):
            return round(large[key] / small[key], 2)
        return None

    return {
        "growth": f"{large['ranks']}/{small['ranks']}",
        "probe_arm_seconds": ratio("probe_arm_seconds"),
        "window_end_to_verdict_seconds": ratio("window_end_to_verdict_seconds"),
        "operator_peak_rss_mib": ratio("operator_peak_rss_mib"),
    }


if __name__ == "__main__":
    sys.exit(main())
