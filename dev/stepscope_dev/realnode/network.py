"""The real node's pod network: a host-only Linux bridge on a private /24, through the CNI bridge
plugin.

Why a host-only bridge and not a network namespace around the node: the API server (webhook calls,
``kubectl logs``/``exec``), the kubelet (probes) and the tests all run in the host's network
namespace and must reach pod addresses, and the node's processes must reach the API server,
which listens on 127.0.0.1 only. A bridge in the host namespace gives both with no veth pair and
no routing of our own. What keeps it private:

* the bridge has no uplink port, and nothing here turns on ``net.ipv4.ip_forward`` (the CNI
  plugin runs with ``isGateway: false``, the one mode in which it does not enable forwarding), so
  no packet crosses between the bridge and the VM's real interfaces in either direction;
* pods get no default route and no masquerading: they reach their own /24 (other pods and the
  bridge's host address) and nothing else;
* the subnet is drawn from 10.213.0.0/16 and checked against every address and route the host
  already has, so parallel instances never share one.

The harness gives the bridge its address itself (the plugin would only do so as a gateway).

The /24 is split in two halves. Pods get addresses from the upper one. The lower one is the API
server's service range (``--service-cluster-ip-range``), whose first address, the one the API
server always gives the ``kubernetes`` Service, is the bridge's own address: so the ClusterIP the
kubelet hands every pod in ``KUBERNETES_SERVICE_HOST`` is an address the pods reach, and the
node's relay (``bridge_relay``) answers there on the Service's port 443 for the API server. Other
ClusterIPs of that half answer nothing, as no service IP does without kube-proxy.
"""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
from pathlib import Path

POOL = ipaddress.ip_network("10.213.0.0/16")
CNI_BIN_DIR = Path("/usr/lib/cni")
NETWORK_NAME = "stepscope-real-node"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def _networks_in_use() -> list[ipaddress.IPv4Network]:
    used = []
    for line in (
        _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show").stdout
    ).splitlines():
        for word in line.split():
            try:
                used.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                continue
    return [net for net in used if net.version == 4 and net.prefixlen > 0]


def choose_subnet(
    used: list[ipaddress.IPv4Network] | None = None, rng: random.Random | None = None
) -> ipaddress.IPv4Network:
    """A /24 of POOL that overlaps none of ``used`` (default: what the host addresses or
    routes now), drawn at random so parallel instances rarely race for the same one."""
    rng = rng or random.SystemRandom()
    used = _networks_in_use() if used is None else used
    candidates = list(POOL.subnets(new_prefix=24))
    rng.shuffle(candidates)
    for subnet in candidates:
        if not any(subnet.overlaps(net) for net in used):
            return subnet
    raise RuntimeError(f"every /24 of {POOL} is already in use on this host")


def bridge_name(instance_id: str) -> str:
    """Interface names have at most 15 characters."""
    return f"ssn{instance_id[:12]}"


def host_address(subnet: ipaddress.IPv4Network) -> str:
    """The bridge's own address: the node's InternalIP and where pods reach the host."""
    return str(next(subnet.hosts()))


def service_range(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The lower half of the bridge's /24: the API server's service range, whose first address
    (the ``kubernetes`` Service's ClusterIP) is the bridge's host address."""
    lower, _ = subnet.subnets(prefixlen_diff=1)
    return lower


def pod_range(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The upper half of the bridge's /24, where pods get their addresses (never a ClusterIP)."""
    _, upper = subnet.subnets(prefixlen_diff=1)
    return upper


def create_bridge(name: str, subnet: ipaddress.IPv4Network) -> None:
    _ip("link", "add", "name", name, "type", "bridge")
    try:
        _ip("addr", "add", f"{host_address(subnet)}/{subnet.prefixlen}", "dev", name)
        _ip("link", "set", name, "up")
    except BaseException:
        delete_bridge(name)
        raise


def delete_bridge(name: str) -> None:
    """Remove the bridge (and with it every pod's veth still on it); absent is fine."""
    _ip("link", "del", name, check=False)


def write_cni_config(
    conf_dir: Path, ipam_dir: Path, name: str, subnet: ipaddress.IPv4Network
) -> Path:
    """The one network containerd's CRI plugin loads from ``conf_dir``."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": name,
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    # The pods' route stays the whole /24, so they reach the host address in
                    # the lower half; their own addresses come from the upper half only.
                    "ranges": [
                        [
                            {
                                "subnet": str(subnet),
                                "rangeStart": str(pod_range(subnet)[1]),
                                "rangeEnd": str(pod_range(subnet)[-2]),
                            }
                        ]
                    ],
                },
            }
        ],
    }
    path = conf_dir / "10-stepscope.conflist"
    path.write_text(json.dumps(config, indent=2))
    return path
