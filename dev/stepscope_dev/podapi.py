"""What the local pod runner reads and writes through the API server, with the kubernetes client.

Objects are handled as plain JSON dicts (``_preload_content=False``), in the field names of the
Kubernetes API documentation, rather than as the client's generated classes.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import urllib3
from kubernetes import client

from stepscope_dev.podenv import decode_secret_data

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30
MERGE_PATCH = "application/merge-patch+json"
STATUS_ATTEMPTS = 5
TERMINAL_PHASES = ("Succeeded", "Failed")


class PodApi:
    """The runner's API calls: pods, bindings, and the objects pods reference."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        """Every pod in the cluster, and the resourceVersion to watch from."""
        response = self.core.list_pod_for_all_namespaces(
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
        )
        body = json.loads(response.data)
        return body["items"], body["metadata"]["resourceVersion"]

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        """Assign a pod to the node through the binding subresource, as kube-scheduler does."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        # The response is a Status, which the client cannot read as the V1Binding it expects.
        self.core.create_namespaced_pod_binding(
            name, namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
        )

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Write a pod's status, retrying a few times: a pod whose processes run must not fail
        because the API server hiccupped once."""
        for attempt in range(1, STATUS_ATTEMPTS + 1):
            try:
                self.core.patch_namespaced_pod_status(
                    name,
                    namespace,
                    {"status": status},
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT_S,
                )
                return
            except client.ApiException as error:
                if error.status == 404:
                    log.info("pod %s/%s is gone; status not written", namespace, name)
                    return
                if (error.status < 500 and error.status != 429) or attempt == STATUS_ATTEMPTS:
                    raise
            except (urllib3.exceptions.HTTPError, OSError):
                if attempt == STATUS_ATTEMPTS:
                    raise
            time.sleep(0.5 * attempt)

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """Finish a graceful deletion, as a kubelet does once the containers are gone."""
        try:
            self.core.delete_namespaced_pod(
                name,
                namespace,
                grace_period_seconds=0,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
                ),
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except client.ApiException as error:
            if error.status not in (404, 409):
                raise

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        body = self._read(self.core.read_namespaced_secret, namespace, name)
        return None if body is None else decode_secret_data(body.get("data"))

    def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        body = self._read(self.core.read_namespaced_config_map, namespace, name)
        return None if body is None else dict(body.get("data") or {})

    def service_address(self, namespace: str, name: str) -> str | None:
        """The pod IP cluster DNS would answer for a (headless) Service: of a live pod its selector
        matches. Not-ready pods count, as with ``publishNotReadyAddresses``: a PyTorchJob's master
        resolves its own Service before it is ready."""
        service = self._read(self.core.read_namespaced_service, namespace, name)
        selector = (service or {}).get("spec", {}).get("selector")
        if not selector:
            return None
        response = self.core.list_namespaced_pod(
            namespace,
            label_selector=",".join(f"{key}={value}" for key, value in sorted(selector.items())),
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
        return _first_live_address(json.loads(response.data)["items"])

    def pod_hostname_address(self, namespace: str, subdomain: str, hostname: str) -> str | None:
        """The pod IP cluster DNS would answer for ``<hostname>.<subdomain>``: of a live pod with
        that ``spec.hostname`` and ``spec.subdomain`` (JobSet gives its pods both)."""
        response = self.core.list_namespaced_pod(
            namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
        )
        return _first_live_address(
            pod
            for pod in json.loads(response.data)["items"]
            if pod["spec"].get("hostname") == hostname and pod["spec"].get("subdomain") == subdomain
        )

    @staticmethod
    def _read(read: Any, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = read(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return json.loads(response.data)


def _first_live_address(pods: Any) -> str | None:
    """The address of the first (by name) pod that has one and is neither finished nor being
    deleted."""
    addresses = sorted(
        (pod["metadata"]["name"], pod["status"]["podIP"])
        for pod in pods
        if pod.get("status", {}).get("podIP")
        and pod["status"].get("phase") not in TERMINAL_PHASES
        and not pod["metadata"].get("deletionTimestamp")
    )
    return addresses[0][1] if addresses else None
