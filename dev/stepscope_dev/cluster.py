"""A real, local Kubernetes control plane and S3 server on loopback.

`start_cluster` runs etcd, kube-apiserver (RBAC, its own serving certificate,
service-account signing keys), kube-controller-manager (garbage collection,
namespace deletion, service-account tokens) and versitygw (S3 with SigV4), each
on a free loopback port, with every file under one instance directory. The
instance's state (ports, PIDs, keys) is saved there, so `stepscope dev down` in
another process stops exactly what `up` started.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stepscope_dev import pki as pki_module
from stepscope_dev.admission import write_admission_config
from stepscope_dev.kubeconfig import write_kubeconfig
from stepscope_dev.net import free_port
from stepscope_dev.processes import pid_alive, start_process, stop_pid

CRDS_DIR = Path(__file__).resolve().parents[2] / "crds"

STATE_FILE = "instance.json"
S3_REGION = "us-east-1"
S3_BUCKET = "stepscope"
# There is no kube-proxy here, so no service IP is ever routed; the range only
# has to be valid and distinct from the 127.0.0.0/8 pod addresses. A real node replaces it
# with the lower half of its bridge's /24 (stepscope_dev.realnode.network.service_range).
SERVICE_CIDR = "10.96.0.0/16"
STARTUP_TIMEOUT_S = 120.0


@dataclass
class LocalCluster:
    """Where a running instance lives and how to reach it."""

    root: Path
    bin_dir: Path
    api_port: int
    etcd_port: int
    etcd_peer_port: int
    controller_manager_port: int
    s3_port: int
    s3_access_key: str
    s3_secret_key: str
    s3_region: str = S3_REGION
    s3_bucket: str = S3_BUCKET
    pids: dict[str, int] = field(default_factory=dict)
    # What `--node real` created besides processes (stepscope_dev.realnode.node); empty without.
    real_node: dict = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def env(self) -> dict[str, str]:
        """The variables a shell, the operator or a test needs to use this instance."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "STEPSCOPE_S3_ENDPOINT": self.s3_endpoint,
            "STEPSCOPE_S3_BUCKET": self.s3_bucket,
            "STEPSCOPE_S3_REGION": self.s3_region,
            "AWS_ACCESS_KEY_ID": self.s3_access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3_secret_key,
            "AWS_DEFAULT_REGION": self.s3_region,
            "STEPSCOPE_DEV_BIN": str(self.bin_dir),
        }

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, result.args, result.stdout, result.stderr
            )
        return result

    def get_json(self, path: str, **query: str) -> dict | None:
        """GET ``path`` from the API server in this process (stepscope_dev.api_reads): the JSON
        `kubectl get -o json` would print, or None where the object is not found."""
        from stepscope_dev.api_reads import api_reader

        return api_reader(self.kubeconfig).get(path, **query)

    def has_default_service_account(self, namespace: str) -> bool:
        """Whether ``namespace``'s default ServiceAccount exists: admission refuses pods until
        the controller manager makes it, shortly after the namespace."""
        from stepscope_dev.api_reads import object_path

        return self.get_json(object_path("serviceaccounts", namespace, "default")) is not None

    def s3_client(self, *, secret_key: str | None = None):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            region_name=self.s3_region,
            aws_access_key_id=self.s3_access_key,
            aws_secret_access_key=secret_key or self.s3_secret_key,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                retries={"max_attempts": 2},
            ),
        )

    def save(self) -> None:
        data = asdict(self)
        data["root"], data["bin_dir"] = str(self.root), str(self.bin_dir)
        (self.root / STATE_FILE).write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, root: Path) -> LocalCluster:
        data = json.loads((root / STATE_FILE).read_text())
        data["root"], data["bin_dir"] = Path(data["root"]), Path(data["bin_dir"])
        return cls(**data)

    def running(self) -> dict[str, bool]:
        return {name: pid_alive(pid) for name, pid in self.pids.items()}

    @property
    def service_cidr(self) -> str:
        return self.real_node.get("service_range") or SERVICE_CIDR


def _kubernetes_service_flags(cluster: LocalCluster) -> list[str]:
    """Where the `kubernetes` Service's endpoint points. With a real node it is the bridge
    address (where the node's relay serves the API server to pods), published by the lease
    reconciler like any cluster's; without one there is no address a pod could reach, and
    the loopback address cannot be published (validation forbids 127.0.0.0/8)."""
    address = cluster.real_node.get("address")
    if address:
        return [f"--advertise-address={address}", "--endpoint-reconciler-type=lease"]
    return ["--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]


def _wait_until(what: str, check, cluster: LocalCluster, timeout: float = STARTUP_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for name, alive in cluster.running().items():
            if not alive:
                log = (cluster.logs_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited while waiting for {what}; its log ends:\n{log}")
        try:
            if check():
                return
        except Exception as error:  # noqa: BLE001 - any failure means "not ready yet".
            last_error = error
        time.sleep(0.25)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s (last error: {last_error})")


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status == 200
    except urllib.error.URLError:
        return False


def _start_etcd(cluster: LocalCluster, die_with_parent: bool) -> None:
    client = f"http://127.0.0.1:{cluster.etcd_port}"
    peer = f"http://127.0.0.1:{cluster.etcd_peer_port}"
    proc = start_process(
        [
            str(cluster.bin_dir / "etcd"),
            "--name",
            "local",
            "--data-dir",
            str(cluster.root / "etcd"),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"local={peer}",
            # A throw-away test store: skipping fsync makes start-up and every
            # write an order of magnitude faster on small disks.
            "--unsafe-no-fsync",
            "--log-level",
            "warn",
        ],
        cluster.logs_dir / "etcd.log",
        die_with_parent=die_with_parent,
    )
    cluster.pids["etcd"] = proc.pid
    _wait_until("etcd", lambda: _http_ok(f"{client}/health"), cluster)


def _start_apiserver(cluster: LocalCluster, keys: pki_module.Pki, die_with_parent: bool) -> None:
    admission_config = write_admission_config(
        cluster.root, keys.webhook_client_cert, keys.webhook_client_key
    )
    proc = start_process(
        [
            str(cluster.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{cluster.etcd_port}",
            "--bind-address=127.0.0.1",
            *_kubernetes_service_flags(cluster),
            f"--secure-port={cluster.api_port}",
            f"--tls-cert-file={keys.serving_cert}",
            f"--tls-private-key-file={keys.serving_key}",
            f"--client-ca-file={keys.ca_cert}",
            "--authorization-mode=RBAC",
            f"--admission-control-config-file={admission_config}",
            f"--service-account-key-file={keys.service_account_pub}",
            f"--service-account-signing-key-file={keys.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={cluster.service_cidr}",
            "--allow-privileged=true",
            # For a real node (stepscope_dev.realnode): the API server's identity towards
            # kubelets (logs, exec), and webhook Services reached at their endpoints, since no
            # kube-proxy routes service IPs here.
            f"--kubelet-client-certificate={keys.admin_cert}",
            f"--kubelet-client-key={keys.admin_key}",
            # A node's name resolves nowhere here; its InternalIP is where its kubelet serves.
            "--kubelet-preferred-address-types=InternalIP",
            "--enable-aggregator-routing=true",
            "--profiling=false",
            f"--cert-dir={cluster.root / 'apiserver-certs'}",
        ],
        cluster.logs_dir / "kube-apiserver.log",
        die_with_parent=die_with_parent,
    )
    cluster.pids["kube-apiserver"] = proc.pid
    context = ssl.create_default_context(cafile=str(keys.ca_cert))
    context.load_cert_chain(str(keys.admin_cert), str(keys.admin_key))
    _wait_until("kube-apiserver", lambda: _http_ok(f"{cluster.api_url}/readyz", context), cluster)


def _start_controller_manager(
    cluster: LocalCluster, keys: pki_module.Pki, die_with_parent: bool, real_node: bool = False
) -> None:
    kubeconfig = cluster.root / "controller-manager.kubeconfig"
    write_kubeconfig(
        kubeconfig,
        cluster.api_url,
        keys.ca_cert,
        keys.controller_manager_cert,
        keys.controller_manager_key,
        "system:kube-controller-manager",
    )
    proc = start_process(
        [
            str(cluster.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={cluster.controller_manager_port}",
            f"--cert-dir={cluster.root / 'controller-manager-certs'}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={keys.service_account_key}",
            f"--root-ca-file={keys.ca_cert}",
            f"--service-cluster-ip-range={cluster.service_cidr}",
            # The process pod runner's node has no kubelet heartbeats; node lifecycle would
            # taint it and evict the harness's pods. A real node's kubelet renews its lease,
            # and the controller lifts the not-ready taint the kubelet registers with.
            "--controllers=*" if real_node else "--controllers=*,-node-lifecycle-controller",
        ],
        cluster.logs_dir / "kube-controller-manager.log",
        die_with_parent=die_with_parent,
    )
    cluster.pids["kube-controller-manager"] = proc.pid

    def default_service_account_exists() -> bool:
        return (
            cluster.kubectl(
                "get", "serviceaccount", "default", "-n", "default", check=False, timeout=10
            ).returncode
            == 0
        )

    _wait_until(
        "kube-controller-manager (default ServiceAccount)", default_service_account_exists, cluster
    )


def _start_s3(cluster: LocalCluster, die_with_parent: bool) -> None:
    data = cluster.root / "s3"
    data.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # Pass the keys through the environment so they never show in `ps`.
    env.update(
        ROOT_ACCESS_KEY_ID=cluster.s3_access_key, ROOT_SECRET_ACCESS_KEY=cluster.s3_secret_key
    )
    proc = start_process(
        [
            str(cluster.bin_dir / "versitygw"),
            "--port",
            f"127.0.0.1:{cluster.s3_port}",
            "--region",
            cluster.s3_region,
            "posix",
            str(data),
        ],
        cluster.logs_dir / "versitygw.log",
        env=env,
        die_with_parent=die_with_parent,
    )
    cluster.pids["versitygw"] = proc.pid

    def bucket_ready() -> bool:
        client = cluster.s3_client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if cluster.s3_bucket not in existing:
            client.create_bucket(Bucket=cluster.s3_bucket)
        return True

    _wait_until("versitygw", bucket_ready, cluster)


def start_cluster(
    root: Path, bin_dir: Path, *, die_with_parent: bool = False, real_node: bool = False
) -> LocalCluster:
    """Start every component under `root` and return once all of them answer.

    ``real_node`` prepares the control plane for ``stepscope_dev.realnode``: the node's bridge
    is made first (``prepare_real_node``), so the API server's certificate names its address and
    its service range is the bridge's lower half; node lifecycle is on. The node itself is
    started by ``start_real_node``."""
    if (root / STATE_FILE).exists():
        previous = LocalCluster.load(root)
        if any(previous.running().values()):
            raise RuntimeError(
                f"an instance is already running in {root}; run `stepscope dev down` first"
            )
    # Every instance starts empty: its certificates are new, so objects kept from an
    # earlier run (pods of a finished job, tokens signed by an old key) would only mislead.
    if root.exists() and any(root.iterdir()) and not (root / STATE_FILE).exists():
        raise RuntimeError(
            f"{root} is not empty and holds no stepscope instance; "
            "choose an empty or new directory for --instance"
        )
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    cluster = LocalCluster(
        root=root,
        bin_dir=bin_dir,
        api_port=free_port(),
        etcd_port=free_port(),
        etcd_peer_port=free_port(),
        controller_manager_port=free_port(),
        s3_port=free_port(),
        s3_access_key="stepscope" + secrets.token_hex(4),
        s3_secret_key=secrets.token_urlsafe(30),
    )
    try:
        server_ips: tuple[str, ...] = ()
        if real_node:
            from stepscope_dev.realnode.node import prepare_real_node

            server_ips = (prepare_real_node(cluster),)
        keys = pki_module.create_pki(root / "pki", extra_server_ips=server_ips)
        write_kubeconfig(
            cluster.kubeconfig,
            cluster.api_url,
            keys.ca_cert,
            keys.admin_cert,
            keys.admin_key,
            "stepscope-admin",
        )
        for start in (_start_etcd, _start_s3):
            start(cluster, die_with_parent)
            cluster.save()
        _start_apiserver(cluster, keys, die_with_parent)
        cluster.save()
        _start_controller_manager(cluster, keys, die_with_parent, real_node)
        cluster.save()
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: LocalCluster) -> None:
    """Stop every process of the instance, newest first, by PID."""
    if cluster.real_node or "kubelet" in cluster.pids:
        from stepscope_dev.realnode.node import stop_real_node

        stop_real_node(cluster)
    for name in reversed(list(cluster.pids)):
        stop_pid(cluster.pids[name])
    cluster.pids.clear()
    cluster.save()


def apply_project_crds(cluster: LocalCluster, *plurals: str) -> None:
    """Apply the project's CRDs (crds/) and wait until the named ones (plurals, such as
    ``profilesessions``) are Established, so a create right after is not refused."""
    cluster.kubectl("apply", "-f", str(CRDS_DIR))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{plural}.stepscope.dev" for plural in plurals),
    )
