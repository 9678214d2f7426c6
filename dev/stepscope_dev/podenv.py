"""A container's environment, command and paths, as the kubelet gives them, for a local process.

Pure functions over the pod as a JSON dict; the objects they need from the API server (Secrets,
ConfigMaps, Services) come through a small ``ObjectSource`` the caller provides.

Three things differ from a real node, because the local pod runner has no container runtime:

* Paths. A container sees its volumes at their ``mountPath``; a local process sees the host
  directory the runner made for the volume. The runner rewrites every path under a mount path in
  the command, args, env values and working directory (``rewrite_mount_paths``).
* Names. There is no cluster DNS. The well-known variables in ``SERVICE_ADDRESS_ENV`` (e.g. the
  ``MASTER_ADDR`` a PyTorchJob sets to its ``<job>-master-0`` Service) are rewritten to the pod IP
  behind that Service, which is what cluster DNS answers for a headless Service; a pod's own DNS
  name ``<hostname>.<subdomain>`` (the ``PET_MASTER_ADDR`` Kubeflow Trainer sets to its first
  JobSet pod) is rewritten to that pod's IP.
* Executables. ``python``/``python3``/``python3.X`` run this interpreter (the repository's
  virtualenv, ``sys.executable``); other names are looked up on a ``PATH`` that starts with the
  virtualenv's ``bin`` (so console scripts like ``stepscope-agent`` resolve).
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

SERVICE_ADDRESS_ENV = ("MASTER_ADDR", "PET_MASTER_ADDR")
"""Variables whose value may be a Service name; they are resolved like cluster DNS would."""

PYTHON_NAMES = re.compile(r"^python(3(\.\d+)?)?$")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class PodSpecError(ValueError):
    """The pod asks for something the local pod runner cannot do; retrying will not help."""


class NotReadyYet(RuntimeError):
    """Something the container needs (a Secret, a Service's pod address) is not there yet.

    A kubelet keeps such a container waiting and retries; so does the local pod runner, up to
    a deadline. ``reason`` is the waiting reason written into the container status.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ObjectSource(Protocol):
    """Reads what a pod references from the API server; ``None`` when the object is absent."""

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None: ...

    def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None: ...

    def service_address(self, namespace: str, name: str) -> str | None: ...

    def pod_hostname_address(self, namespace: str, subdomain: str, hostname: str) -> str | None: ...


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in (data or {}).items()}


def field_value(pod: Mapping[str, Any], field_path: str) -> str:
    """The downward-API value of ``field_path`` (``valueFrom.fieldRef``) for ``pod``."""
    metadata, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(ip["ip"] for ip in status.get("podIPs") or []),
        "status.hostIPs": ",".join(ip["ip"] for ip in status.get("hostIPs") or []),
    }
    if field_path in simple:
        return simple[field_path] or ""
    keyed = _FIELD_KEY.match(field_path)
    if keyed:
        return (metadata.get(keyed.group(1)) or {}).get(keyed.group(2), "")
    raise PodSpecError(f"fieldRef.fieldPath {field_path!r} is not a downward-API field for env")


def expand_references(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names are replaced, unknown ones stay as written,
    and ``$$`` is a literal ``$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, text)


def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], source: ObjectSource
) -> dict[str, str]:
    """``envFrom`` then ``env`` of ``container``, in order, with references expanded and
    ``valueFrom`` resolved. Raises ``NotReadyYet`` for a missing required Secret/ConfigMap."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for index, env_from in enumerate(container.get("envFrom") or []):
        prefix = env_from.get("prefix", "")
        data = _env_from_source(namespace, env_from, source, f"envFrom[{index}]")
        env.update({prefix + key: value for key, value in data.items()})
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" in item:
            value = _value_from(pod, namespace, name, item["valueFrom"], source)
            if value is None:
                continue
            env[name] = value
        else:
            env[name] = expand_references(item.get("value", ""), env)
    return env


def resolve_service_addresses(
    env: dict[str, str], namespace: str, source: ObjectSource
) -> dict[str, str]:
    """``env`` with each ``SERVICE_ADDRESS_ENV`` variable that names a Service or a pod's
    hostname replaced by that pod's address. Raises ``NotReadyYet`` while there is none."""
    resolved = dict(env)
    for name in SERVICE_ADDRESS_ENV:
        value = env.get(name, "")
        pod_host = parse_pod_host(value, namespace)
        service = parse_service_host(value, namespace)
        # Cluster DNS tries the pod's own namespace first (search path <ns>.svc.cluster.local),
        # so "a.b" is pod a of subdomain b here before it is Service a of namespace b.
        address = None
        if pod_host is not None:
            address = source.pod_hostname_address(pod_host[2], pod_host[1], pod_host[0])
        if address is None and service is not None:
            address = source.service_address(service[1], service[0])
        if pod_host is None and service is None:
            continue
        if address is None:
            looked_up = []
            if pod_host is not None:
                host, subdomain, host_namespace = pod_host
                looked_up.append(f"hostname {host} of subdomain {host_namespace}/{subdomain}")
            if service is not None:
                looked_up.append(f"Service {service[1]}/{service[0]}")
            raise NotReadyYet(
                "ServiceAddressPending",
                f"{name}={value}: no running pod with an address behind "
                f"{' or '.join(looked_up)} yet",
            )
        resolved[name] = address
    return resolved


def parse_pod_host(value: str, namespace: str) -> tuple[str, str, str] | None:
    """``(hostname, subdomain, namespace)`` for the DNS name of a pod with ``spec.hostname`` and
    ``spec.subdomain`` (``host.sub``, ``host.sub.ns``, ``host.sub.ns.svc`` or
    ``host.sub.ns.svc.cluster.local``), as JobSet's pods have; ``None`` otherwise."""
    if not value or _is_ip(value):
        return None
    labels = value.rstrip(".").split(".")
    if len(labels) == 2:
        return labels[0], labels[1], namespace
    if (
        len(labels) >= 3
        and labels[2] != "svc"  # "svc.ns.svc" is a Service
        and labels[3:] in ([], ["svc"], ["svc", "cluster", "local"])
    ):
        return labels[0], labels[1], labels[2]
    return None


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def parse_service_host(value: str, namespace: str) -> tuple[str, str] | None:
    """``(service, namespace)`` for a cluster DNS name (``svc``, ``svc.ns``, ``svc.ns.svc`` or
    ``svc.ns.svc.cluster.local``); ``None`` for IP addresses, ``localhost`` and other hosts."""
    if not value or value == "localhost":
        return None
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    labels = value.rstrip(".").split(".")
    if labels[2:] in ([], ["svc"], ["svc", "cluster", "local"]):
        return labels[0], labels[1] if len(labels) > 1 else namespace
    return None


def rewrite_mount_paths(text: str, mounts: Mapping[str, Path]) -> str:
    """``text`` with every path under a container mount path replaced by its host directory.

    A mount path is replaced where it starts a path: at the beginning, or after ``:`` (PATH-like
    lists), ``=`` (``--flag=/path``) or whitespace (shell snippets), and where it ends at ``/``,
    ``:``, whitespace or the end. Longer mount paths win over their prefixes.
    """
    for mount_path in sorted(mounts, key=len, reverse=True):
        pattern = rf"(?:^|(?<=[:=\s])){re.escape(mount_path.rstrip('/'))}(?=$|[/:\s])"
        text = re.sub(pattern, lambda _m, p=mount_path: str(mounts[p]), text)
    return text


def process_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded; images are never pulled, so a container
    must name its command."""
    command = container.get("command") or []
    if not command:
        raise PodSpecError(
            f"container {container['name']!r} has no command: the local pod runner does not pull "
            "images, so set spec.containers[].command (e.g. [python, /workspace/train.py])"
        )
    return [expand_references(part, env) for part in [*command, *(container.get("args") or [])]]


def resolve_executable(name: str, path: str) -> str:
    """The local program for a container's ``command[0]``."""
    if PYTHON_NAMES.match(os.path.basename(name)):
        return sys.executable
    if os.sep in name:
        if not os.access(name, os.X_OK):
            raise PodSpecError(f"command {name!r} is not an executable file on this machine")
        return name
    found = shutil.which(name, path=path)
    if found is None:
        raise PodSpecError(f"command {name!r} is not on PATH ({path})")
    return found


def process_path() -> str:
    """The ``PATH`` of pod processes: the virtualenv's scripts first, then the system's."""
    return f"{Path(sys.executable).parent}:{SYSTEM_PATH}"


def _env_from_source(
    namespace: str, env_from: Mapping[str, Any], source: ObjectSource, where: str
) -> dict[str, str]:
    if "configMapRef" in env_from:
        ref = env_from["configMapRef"]
        data = source.config_map_data(namespace, ref["name"])
        kind = "ConfigMap"
    elif "secretRef" in env_from:
        ref = env_from["secretRef"]
        data = source.secret_data(namespace, ref["name"])
        kind = "Secret"
    else:
        raise PodSpecError(f"{where} needs configMapRef or secretRef")
    if data is None:
        if ref.get("optional"):
            return {}
        raise NotReadyYet(
            "CreateContainerConfigError", f"{kind} {namespace}/{ref['name']} not found"
        )
    return data


def _value_from(
    pod: Mapping[str, Any],
    namespace: str,
    name: str,
    value_from: Mapping[str, Any],
    source: ObjectSource,
) -> str | None:
    if "fieldRef" in value_from:
        return field_value(pod, value_from["fieldRef"]["fieldPath"])
    for key, kind, read in (
        ("secretKeyRef", "Secret", source.secret_data),
        ("configMapKeyRef", "ConfigMap", source.config_map_data),
    ):
        if key in value_from:
            ref = value_from[key]
            data = read(namespace, ref["name"])
            if data is not None and ref["key"] in data:
                return data[ref["key"]]
            if ref.get("optional"):
                return None
            raise NotReadyYet(
                "CreateContainerConfigError",
                f"env {name}: key {ref['key']!r} of {kind} {namespace}/{ref['name']} not found",
            )
    raise PodSpecError(
        f"env {name}: valueFrom {sorted(value_from)} is not supported by the local pod runner "
        "(use value, fieldRef, secretKeyRef or configMapKeyRef)"
    )
