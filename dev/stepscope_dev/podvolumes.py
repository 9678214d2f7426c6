"""A pod's volumes as directories on this machine, and each container's mount paths onto them.

Every volume of a pod becomes a directory under the pod's scratch directory of the local pod
runner (``/tmp/ssp-<runner>/<pod uid>/v/<volume>``, linked from the pod directory as
``volumes/``), shared by all containers that mount it, as an ``emptyDir`` is shared on a real node:

* ``emptyDir``: an empty directory (its ``medium`` and ``sizeLimit`` are ignored);
* ``configMap``, ``secret``, ``downwardAPI`` and ``projected``: the files the kubelet would write
  (a projected service-account token is not written: pods here do not call the API server);
* ``hostPath``: the host path itself.

Containers see their volumes at the host directories: ``podenv.rewrite_mount_paths`` rewrites
mount paths in commands, args and env values with the map ``container_mounts`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepscope_dev.podenv import NotReadyYet, ObjectSource, PodSpecError, field_value


def materialize_volumes(
    pod: Mapping[str, Any], volumes_dir: Path, source: ObjectSource
) -> dict[str, Path]:
    """Create every volume of ``pod`` under ``volumes_dir``; returns volume name -> directory.

    Raises ``NotReadyYet`` while a required ConfigMap or Secret is missing, as a kubelet keeps
    such a pod in ``ContainerCreating``.
    """
    namespace = pod["metadata"]["namespace"]
    directories: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        if "hostPath" in volume:
            host_path = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                host_path.mkdir(parents=True, exist_ok=True)
            directories[name] = host_path
            continue
        directory = volumes_dir / name
        directory.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in volume:
            pass
        elif "configMap" in volume:
            _write_object(directory, volume["configMap"], namespace, "ConfigMap", source)
        elif "secret" in volume:
            secret = {**volume["secret"], "name": volume["secret"]["secretName"]}
            _write_object(directory, secret, namespace, "Secret", source)
        elif "downwardAPI" in volume:
            _write_downward_api(directory, volume["downwardAPI"], pod)
        elif "projected" in volume:
            _write_projected(directory, volume["projected"], pod, source)
        else:
            kinds = sorted(set(volume) - {"name"})
            raise PodSpecError(
                f"volume {name!r} is of type {kinds}, which the local pod runner does not provide; "
                "use emptyDir, configMap, secret, downwardAPI, projected or hostPath"
            )
        directories[name] = directory
    return directories


def container_mounts(
    container: Mapping[str, Any], volume_dirs: Mapping[str, Path]
) -> dict[str, Path]:
    """The container's mount paths -> host directories (``subPath`` honoured)."""
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volume_dirs:
            raise PodSpecError(
                f"container {container['name']!r} mounts volume {mount['name']!r}, "
                "which spec.volumes does not define"
            )
        target = volume_dirs[mount["name"]]
        if mount.get("subPath"):
            target = target / mount["subPath"]
            target.mkdir(parents=True, exist_ok=True)
        mounts[mount["mountPath"]] = target
    return mounts


def _write_object(
    directory: Path,
    ref: Mapping[str, Any],
    namespace: str,
    kind: str,
    source: ObjectSource,
) -> None:
    read = source.secret_data if kind == "Secret" else source.config_map_data
    data = read(namespace, ref["name"])
    if data is None:
        if ref.get("optional"):
            return
        raise NotReadyYet("ContainerCreating", f"{kind} {namespace}/{ref['name']} not found")
    items = ref.get("items") or [{"key": key, "path": key} for key in data]
    for item in items:
        if item["key"] not in data:
            if ref.get("optional"):
                continue
            raise NotReadyYet(
                "ContainerCreating",
                f"key {item['key']!r} of {kind} {namespace}/{ref['name']} not found",
            )
        _write_file(directory / item["path"], data[item["key"]], secret=kind == "Secret")


def _write_downward_api(directory: Path, spec: Mapping[str, Any], pod: Mapping[str, Any]) -> None:
    for item in spec.get("items") or []:
        if "fieldRef" not in item:
            raise PodSpecError(
                f"downwardAPI item {item['path']!r}: the local pod runner supports only fieldRef"
            )
        _write_file(directory / item["path"], field_value(pod, item["fieldRef"]["fieldPath"]))


def _write_projected(
    directory: Path, spec: Mapping[str, Any], pod: Mapping[str, Any], source: ObjectSource
) -> None:
    namespace = pod["metadata"]["namespace"]
    for projection in spec.get("sources") or []:
        if "configMap" in projection:
            _write_object(directory, projection["configMap"], namespace, "ConfigMap", source)
        elif "secret" in projection:
            _write_object(directory, projection["secret"], namespace, "Secret", source)
        elif "downwardAPI" in projection:
            _write_downward_api(directory, projection["downwardAPI"], pod)
        # serviceAccountToken and clusterTrustBundle sources are skipped: see the module doc.


def _write_file(path: Path, content: str, *, secret: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    if secret:
        path.chmod(0o600)
