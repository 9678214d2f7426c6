"""The operator idle and under one hostile tenant's attack: event-loop lag and peak RSS.

A real API server, S3, controller manager and pod runner (the local control plane); the
real operator process; namespace ``victim`` with an agent fleet of real sidecars (2 pods of
2 ranks) and namespace ``attacker`` with `stepscope_dev.hostile.tenant`'s tenant: a session
per case of the hostile-reply table (every agent endpoint answered with counts past the
model, deep nesting, wrong types, long strings, dripping, silent, endless and oversized
bodies, a hang dump with a process group per collective) plus two over a pod declaring a
hundred million ranks: 63 sessions, created and run at once (`attack_settings`).

Idle: the victim's ordinary session alone, from creation to Succeeded. Attack: the same
session again while every hostile session runs, until the last of them ends. For each
phase one JSON line: the event loop's p99 lag over the phase (from the operator's own
``stepscope_operator_event_loop_lag_seconds`` histogram, interpolated within its
buckets), the bucket bound every wake-up of the phase came within and how many came over
a second late, the longest lag since the start (the gauge), the operator's peak RSS
(VmHWM) at the phase's end, the victim's session time and the load average; the last line
has the ratios attack / idle. The held lag (``..._event_loop_held_seconds``: each lag at
most the CPU time the operator used meanwhile) is the part the operator's own work could
have caused; on a shared machine the rest, and the load average, is other processes
holding the CPU.

    python bench/bench_hostile_tenant.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from stepscope_dev.agent_fleet import AgentFleet
from stepscope_dev.build import ensure_binaries
from stepscope_dev.cluster import apply_project_crds, start_cluster, stop_cluster
from stepscope_dev.fleet_traces import RECORDED_STEPS
from stepscope_dev.hostile.tenant import attack_settings, create_pods, hostile_tenant
from stepscope_dev.net import free_port
from stepscope_dev.operator_health import (
    chart_memory_limit,
    lag_quantile,
    late_wakeups,
    longest_lag_bound,
    memory_of,
    scrape_lag,
)
from stepscope_dev.operator_process import OperatorProcess, operator_env
from stepscope_dev.podrunner import start_podrunner
from stepscope_dev.processes import stop_pid
from stepscope_operator.agents.signing import AgentKeyring

KEYRING = AgentKeyring.generate()
FINAL = ("Succeeded", "PartiallySucceeded", "Failed", "Diagnosed")
HOSTILE_TIMEOUT_S = 20
ATTACK_END_S = 180
GROUP, VERSION, PLURAL = "stepscope.dev", "v1alpha1", "profilesessions"


def victim_session(namespace: str, name: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProfileSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"podSelector": {"matchLabels": {"app": "victim"}}},
            "granularity": "ops",
            "window": {
                "steps": RECORDED_STEPS,
                "warmupSteps": 0,
                "leadSeconds": 1,
                "timeoutSeconds": 90,
            },
        },
    }


def start_victim(core: k8s.CoreV1Api, cluster, root: Path) -> AgentFleet:
    fleet = AgentFleet(
        root / "victim", "victim", free_port(), KEYRING.trusted_keys_text(), cluster.s3_endpoint
    )
    fleet.add_pods(core, [f"victim-{i}" for i in range(2)], 2, job="victim")
    fleet.start()
    return fleet


def phases(custom: k8s.CustomObjectsApi, namespace: str, names: list[str]) -> dict[str, str]:
    found = {}
    for name in names:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        found[name] = (body.get("status") or {}).get("phase")
    return found


def wait_final(custom, namespace: str, names: list[str], within: float) -> dict[str, str]:
    deadline = time.monotonic() + within
    while True:
        found = phases(custom, namespace, names)
        if all(p in FINAL for p in found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def run_victim(custom, name: str) -> tuple[float, str]:
    started = time.monotonic()
    custom.create_namespaced_custom_object(
        GROUP, VERSION, "victim", PLURAL, victim_session("victim", name)
    )
    phase = wait_final(custom, "victim", [name], 180)[name]
    return round(time.monotonic() - started, 2), phase


def scrape_both(metrics: str) -> tuple:
    """The lag and the held lag, scraped now."""
    return scrape_lag(metrics), scrape_lag(metrics, held=True)


def phase_line(name: str, before, after, operator, victim: tuple[float, str]) -> dict:
    window, held = after[0].since(before[0]), after[1].since(before[1])
    return {
        "phase": name,
        "loop_held_p99_s": round(lag_quantile(held, 0.99), 4),
        "loop_held_over_1s": int(late_wakeups(held, 1.0)),
        "loop_held_max_since_start_s": round(after[1].max_s, 4),
        "loop_lag_p99_s": round(lag_quantile(window, 0.99), 4),
        "loop_lag_within_s": longest_lag_bound(window),
        "loop_wakeups_over_1s_late": int(late_wakeups(window, 1.0)),
        "loop_lag_max_since_start_s": round(after[0].max_s, 4),
        "loop_wakeups": int(window[float("inf")]),
        "operator_peak_rss_mib": round(memory_of(operator.pid)["VmHWM"] / 2**20, 1),
        "victim_session_seconds": victim[0],
        "victim_phase": victim[1],
    }


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="stepscope-hostile-") as tmp:
        root = Path(tmp)
        cluster = start_cluster(root / "cluster", ensure_binaries(), die_with_parent=True)
        try:
            apply_project_crds(cluster, PLURAL)
            start_podrunner(cluster, die_with_parent=True)
            api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
            core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
            for namespace in ("victim", "attacker"):
                core.create_namespace({"metadata": {"name": namespace}})
            fleet = start_victim(core, cluster, root)
            tenant = hostile_tenant("attacker", fleet.port, HOSTILE_TIMEOUT_S)
            agents = tenant.agents.serve_apart(root / "hostile-agents.log")
            create_pods(core, "attacker", tenant)
            operator = OperatorProcess(
                operator_env(cluster, KEYRING, **attack_settings(fleet.port)),
                root / "operator.log",
                die_with_parent=True,
            )
            operator.start()
            metrics = f"http://127.0.0.1:{operator.env['STEPSCOPE_METRICS_PORT']}/metrics"
            try:
                lines = measure(custom, tenant, operator, metrics)
            finally:
                operator.stop()
                stop_pid(agents.pid)
                fleet.stop()
        finally:
            stop_cluster(cluster)
    for line in lines:
        print(json.dumps(line), flush=True)
    return 0 if lines[-1]["attack_ended"] else 1


def measure(custom, tenant, operator, metrics: str) -> list[dict]:
    load_before = os.getloadavg()[0]
    start = scrape_both(metrics)
    idle_victim = run_victim(custom, "idle")
    idle_end = scrape_both(metrics)
    idle = phase_line("idle", start, idle_end, operator, idle_victim)
    idle["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]

    load_before = os.getloadavg()[0]
    # All at once, as `kubectl apply` of a list makes them: the burst is part of the attack.
    with ThreadPoolExecutor(16) as creating:
        for session in tenant.sessions:
            creating.submit(
                custom.create_namespaced_custom_object,
                *(GROUP, VERSION, "attacker", PLURAL, session.manifest),
            )
    attacked = time.monotonic()
    attacked_victim = run_victim(custom, "attacked")
    ended = wait_final(
        custom,
        "attacker",
        [s.name for s in tenant.sessions],
        ATTACK_END_S - (time.monotonic() - attacked),
    )
    attack = phase_line("attack", idle_end, scrape_both(metrics), operator, attacked_victim)
    attack["attack_sessions"] = len(tenant.sessions)
    attack["attack_seconds"] = round(time.monotonic() - attacked, 1)
    attack["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]

    def ratio(key: str) -> float | None:
        return round(attack[key] / idle[key], 2) if idle[key] else None

    summary = {
        "attack_over_idle": {
            key: ratio(key)
            for key in (
                "loop_held_p99_s",
                "loop_lag_p99_s",
                "operator_peak_rss_mib",
                "victim_session_seconds",
            )
        },
        "chart_memory_limit_mib": chart_memory_limit() // 2**20,
        "attack_ended": all(p in FINAL for p in ended.values()),
        "attack_phases": {p: list(ended.values()).count(p) for p in set(ended.values())},
    }
    return [idle, attack, summary]


if __name__ == "__main__":
    sys.exit(main())
