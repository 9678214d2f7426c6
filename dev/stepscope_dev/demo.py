"""`make demo`: one ProfileSession from `kubectl apply` to an analysed `kubectl describe`.

Starts the local control plane and S3, then the platform: by default (``--node real``) a real
node (containerd, runc, kubelet, cluster DNS) with images built from our Dockerfiles, the Kubeflow
training operator, and the stepscope operator from its image through charts/stepscope, whose
webhook injects the agents (``demo_node``); with ``--node process`` the pod runner and
the operator as local processes instead. Submits the 4-rank CPU PyTorchJob of dev/demo/; applies
crds/examples/profilesession.yaml; follows the session's phases and Events as they happen;
then prints `kubectl get` and `kubectl describe`, writes the describe output to
<out>/describe.txt and copies the report and merged trace from S3 to the same directory.
Everything it started is stopped at the end unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from stepscope_operator.agents.signing import AgentKeyring

from stepscope_dev import build
from stepscope_dev.cluster import STATE_FILE, LocalCluster, start_cluster, stop_cluster
from stepscope_dev.demojob import job_pods_running, submit_demo_job
from stepscope_dev.operator_process import OperatorProcess, operator_env
from stepscope_dev.podrunner import start_podrunner
from stepscope_dev.trainer_controller import start_trainer_controller
from stepscope_dev.training_operator import start_training_operator
from stepscope_dev.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "default"
SESSION = "ddp-demo-profile"
FINAL_PHASES = ("Succeeded", "PartiallySucceeded", "Failed")
SESSION_TIMEOUT_S = 600.0
# Real containers start slower than processes: four trainers each load torch from the host.
JOB_START_TIMEOUT_S = 420.0
DESCRIBE_FILE = "describe.txt"


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def _start_operator(cluster: LocalCluster, keyring: AgentKeyring) -> None:
    operator = OperatorProcess(
        operator_env(cluster, keyring), cluster.logs_dir / "stepscope-operator.log"
    )
    operator.start()
    cluster.pids["stepscope-operator"] = operator.pid
    cluster.save()


def _session(cluster: LocalCluster) -> dict:
    result = cluster.kubectl("get", "profilesession", SESSION, "-n", NAMESPACE, "-o", "json")
    return json.loads(result.stdout)


def _follow_session(cluster: LocalCluster) -> dict:
    """Print each phase change and each new Event until the session ends."""
    seen_events: set[str] = set()
    phase = None
    deadline = time.monotonic() + SESSION_TIMEOUT_S
    while time.monotonic() < deadline:
        body = _session(cluster)
        status = body.get("status") or {}
        if status.get("phase") != phase:
            phase = status.get("phase")
            window = (status.get("window") or {}).get("range") or "not planned yet"
            say(f"session phase {phase} (window {window})")
        events = json.loads(
            cluster.kubectl(
                "get",
                "events",
                "-n",
                NAMESPACE,
                "-o",
                "json",
                f"--field-selector=involvedObject.name={SESSION}",
            ).stdout
        )["items"]
        for event in sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"])):
            if event["metadata"]["uid"] not in seen_events:
                seen_events.add(event["metadata"]["uid"])
                print(f"    event {event['reason']}: {event.get('message', '')}", flush=True)
        if phase in FINAL_PHASES:
            return body
        time.sleep(1.0)
    raise TimeoutError(f"the session did not finish in {SESSION_TIMEOUT_S:.0f}s")


def _copy_artifacts(cluster: LocalCluster, status: dict, out_dir: Path) -> list[Path]:
    artifacts = status.get("artifacts") or {}
    uri = artifacts.get("uri")
    if not uri:
        return []
    bucket, prefix = uri.removeprefix("s3://").split("/", 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    client = cluster.s3_client()
    copied = []
    for name in ("report.html", "merged.trace.json.gz", "summary.json"):
        target = out_dir / name
        client.download_file(bucket, prefix + name, str(target))
        copied.append(target)
    return copied


def _start_process_platform(cluster: LocalCluster, with_trainer: bool) -> dict:
    """The pod runner, the training operator and the stepscope operator as local processes;
    returns ``submit_demo_job``'s arguments for this platform."""
    say("starting the pod runner and the Kubeflow training operator")
    start_podrunner(cluster)
    start_training_operator(cluster)
    if with_trainer:
        say("starting the JobSet and Kubeflow Trainer v2 controllers")
        start_trainer_controller(cluster)
    cluster.kubectl("apply", "--server-side", "-f", str(REPO_ROOT / "crds"))
    keyring = AgentKeyring.generate()
    say("starting the stepscope operator")
    _start_operator(cluster, keyring)
    # The job declares its agent by hand; the agents trust this operator's keys.
    return {"trusted_keys": keyring.trusted_keys_text()}


def _start_real_platform(cluster: LocalCluster) -> dict:
    from stepscope_dev.demo_node import real_node_job, start_demo_node

    # The chart installs the CRDs: helm owns them, as on a cluster.
    demo_node = start_demo_node(cluster, say)
    # The chart's webhook injects the agents, with the keys the chart generated.
    return {"trusted_keys": None, "shape": lambda job: real_node_job(job, demo_node.node)}


def run_demo(
    instance: Path, out_dir: Path, keep: bool, with_trainer: bool = False, node: str = "real"
) -> int:
    started = time.monotonic()
    real = node == "real"
    if real and with_trainer:
        raise SystemExit("--with-trainer runs on the process pod runner only: add --node process")
    bin_dir = build.ensure_node_binaries() if real else build.ensure_binaries()
    if (instance / STATE_FILE).exists():
        stop_cluster(LocalCluster.load(instance))  # A previous demo left it running.
    say("starting the local control plane and S3")
    cluster = start_cluster(instance, bin_dir, real_node=real)
    try:
        platform = (
            _start_real_platform(cluster)
            if real
            else _start_process_platform(cluster, with_trainer)
        )
        say("submitting the 4-rank CPU PyTorchJob ddp-demo")
        submit_demo_job(cluster, NAMESPACE, **platform)
        wait_until(
            lambda: job_pods_running(cluster, NAMESPACE),
            JOB_START_TIMEOUT_S,
            "the job's 4 pods to run",
            1.0,
        )
        say("applying crds/examples/profilesession.yaml")
        cluster.kubectl(
            "apply",
            "-n",
            NAMESPACE,
            "-f",
            str(REPO_ROOT / "crds" / "examples" / "profilesession.yaml"),
        )
        body = _follow_session(cluster)

        print()
        print("$ kubectl get profilesessions")
        print(cluster.kubectl("get", "profilesessions", "-n", NAMESPACE).stdout)
        print(f"$ kubectl describe profilesession {SESSION}")
        described = cluster.kubectl("describe", "profilesession", SESSION, "-n", NAMESPACE).stdout
        print(described)
        # Kept beside the report: the README's describe block is checked against the same
        # kubectl output (tests/integration/api/test_readme_describe.py).
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / DESCRIBE_FILE).write_text(described, encoding="utf-8")
        say(f"describe output: {out_dir / DESCRIBE_FILE}")
        status = body.get("status") or {}
        artifacts = status.get("artifacts") or {}
        if artifacts.get("uri"):
            say(f"artifacts in S3: {artifacts['uri']}")
            for path in _copy_artifacts(cluster, status, out_dir):
                say(f"  local copy: {path}")
        say(f"demo finished in {time.monotonic() - started:.0f}s with phase {status.get('phase')}")
        return 0 if status.get("phase") == "Succeeded" else 1
    finally:
        if keep:
            say(
                f'left running; use it with `eval "$(stepscope dev --instance {instance} env)"`'
                f" and stop it with `stepscope dev --instance {instance} down`"
            )
        else:
            stop_cluster(cluster)
            say("stopped every process the demo started")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stepscope-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--instance", type=Path, default=build.cache_root() / "instances" / "demo")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "demo-out",
        help="where the describe output, report and merged trace go",
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the control plane, operator and job running"
    )
    parser.add_argument(
        "--with-trainer",
        action="store_true",
        help="also run the JobSet and Kubeflow Trainer v2 controllers (TrainJobs, JobSets); "
        "their first build takes several minutes",
    )
    parser.add_argument(
        "--node",
        choices=("real", "process"),
        default="real",
        help="real: pods run in containers on a real kubelet and containerd, the operator from "
        "its image through the chart (docs/contributing/local-control-plane.md, "
        '"Real node"); process: pods run as local processes under the pod runner, the operator '
        "as a local process",
    )
    args = parser.parse_args(argv)
    return run_demo(args.instance, args.out, args.keep, args.with_trainer, args.node)


if __name__ == "__main__":
    sys.exit(main())
