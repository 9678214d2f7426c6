"""`stepscope dev build | up | down | env | status`: the local control plane from a shell."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from stepscope_dev import build
from stepscope_dev.cluster import STATE_FILE, LocalCluster, start_cluster, stop_cluster

INSTANCE_ENV = "STEPSCOPE_DEV_DIR"
NODE_ENV = "STEPSCOPE_DEV_NODE"


def default_instance_dir() -> Path:
    configured = os.environ.get(INSTANCE_ENV)
    return Path(configured) if configured else build.cache_root() / "instances" / "default"


def _load(instance: Path) -> LocalCluster:
    if not (instance / STATE_FILE).exists():
        raise SystemExit(f"no instance in {instance}; start one with `stepscope dev up`")
    return LocalCluster.load(instance)


def ensure_controllers(bin_dir: Path) -> None:
    """The training operators the tests and the demo run (Kubeflow's training operator, JobSet,
    Trainer v2), built here so that no test pays for a Go build."""
    from stepscope_dev.jobset_controller import ensure_jobset_controller
    from stepscope_dev.trainer_controller import ensure_trainer_controller
    from stepscope_dev.training_operator import ensure_training_operator

    for ensure in (ensure_training_operator, ensure_jobset_controller, ensure_trainer_controller):
        print(ensure(bin_dir))


def cmd_build(args: argparse.Namespace) -> int:
    if args.node != "real":
        bin_dir = build.ensure_binaries()
        print(bin_dir)
        ensure_controllers(bin_dir)
        return 0
    from stepscope_dev.realnode.image_store import prepared_root
    from stepscope_dev.realnode.images import build_node_images, images_dir
    from stepscope_dev.realnode.packages import ensure_packages

    bin_dir = build.ensure_node_binaries()
    print(bin_dir)
    ensure_controllers(bin_dir)
    try:
        ensure_packages()
    except RuntimeError as error:
        # The tests that need the node fail with this same error; a build that made no image
        # must not look like one that did.
        raise SystemExit(
            f"the real node's images are not built: its runtime cannot be installed here: {error}"
        ) from error
    images, archives = build_node_images()
    for reference in vars(images).values():
        print(reference)
    # Unpacked once here, so no node start inside a test's time limit pays the import.
    print(prepared_root(images_dir(), archives, images.pause))
    return 0


def _runtime_unavailable(error: Exception) -> SystemExit:
    return SystemExit(
        f"the real node cannot start on this machine: {error}\n"
        "`stepscope dev up --node process` starts the control plane and S3 without a node "
        "(pods then run only under the process pod runner, as the test fixtures start it)"
    )


def cmd_up(args: argparse.Namespace) -> int:
    from stepscope_dev.realnode.node import RuntimeUnavailable, start_real_node

    real = args.node == "real"
    bin_dir = build.ensure_node_binaries() if real else build.ensure_binaries()
    try:
        cluster = start_cluster(args.instance, bin_dir, real_node=real)
    except RuntimeUnavailable as error:
        raise _runtime_unavailable(error) from error
    print(f"local control plane up in {args.instance}", file=sys.stderr)
    if real:
        try:
            node = start_real_node(cluster)
        except RuntimeUnavailable as error:
            stop_cluster(cluster)
            raise _runtime_unavailable(error) from error
        except BaseException:
            stop_cluster(cluster)
            raise
        print(
            f"  real node {node.name} ({node.address}); pods reach the API server at "
            f"{node.api_server}, S3 at {node.s3_endpoint} and cluster DNS (CoreDNS) at "
            f"{node.address}:53; images:",
            file=sys.stderr,
        )
        for role, reference in vars(node.images).items():
            print(f"    {role:9} {reference}", file=sys.stderr)
    print(
        f"  kube-apiserver {cluster.api_url}\n  S3 {cluster.s3_endpoint} "
        f"(bucket {cluster.s3_bucket})",
        file=sys.stderr,
    )
    print('run `eval "$(stepscope dev env)"` to use it', file=sys.stderr)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    if not (args.instance / STATE_FILE).exists():
        print(f"nothing running in {args.instance}", file=sys.stderr)
        return 0
    stop_cluster(_load(args.instance))
    print(f"stopped every process of {args.instance}", file=sys.stderr)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    cluster = _load(args.instance)
    for key, value in cluster.env().items():
        print(f"export {key}={shlex.quote(value)}")
    print(f'export PATH={shlex.quote(str(cluster.bin_dir))}:"$PATH"')
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cluster = _load(args.instance)
    states = cluster.running()
    for name, alive in states.items():
        print(f"{name:28} pid {cluster.pids[name]:>7}  {'running' if alive else 'stopped'}")
    return 0 if states and all(states.values()) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepscope dev",
        description="For contributors to stepscope, not part of the product: builds Kubernetes "
        "and the training operators from source and starts a local control plane (the real node "
        "needs root) for the tests and the demo.",
    )
    parser.add_argument(
        "--instance",
        type=Path,
        default=default_instance_dir(),
        help=f"instance directory (default ${INSTANCE_ENV} or the cache)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, help_text in (
        (
            "build",
            cmd_build,
            "build every binary and training operator from its Go module (cached)",
        ),
        ("up", cmd_up, "build what is missing and start the control plane and S3"),
        ("down", cmd_down, "stop every process the instance started"),
        ("env", cmd_env, "print the KUBECONFIG and S3 settings to export"),
        ("status", cmd_status, "show which processes are running"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.set_defaults(handler=handler)
        if name == "build":
            command.add_argument(
                "--node",
                choices=("process", "real"),
                default="process",
                help="real: also the real node's binaries (kubelet, kube-scheduler, CoreDNS), "
                "its Debian packages and its images",
            )
        if name == "up":
            command.add_argument(
                "--node",
                choices=("process", "real"),
                default=os.environ.get(NODE_ENV, "real"),
                help="real: a kubelet, containerd and CoreDNS with images built from our "
                "Dockerfiles; process: no node (the test fixtures start the process pod runner "
                f"when they need one) (default ${NODE_ENV} or real)",
            )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
