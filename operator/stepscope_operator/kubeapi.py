"""The operator's Kubernetes reads and writes, as plain dicts (camelCase, as served).

The kubernetes client is synchronous; every call runs in a worker thread so the
kopf event loop keeps serving other sessions. The objects a session targets
(PyTorchJobs, TrainJobs, JobSets) are only ever read: their own operators own them,
and which resource each kind reads is its adapter's (`stepscope_operator.targets.kinds`).
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from stepscope.api.session import GROUP, VERSION
from stepscope.api.text import clip_text
from stepscope_operator.targets.kinds import JobResource
from stepscope_operator.threads import BLOCKING_THREADS, OPERATOR, in_thread

SESSION_PLURAL = "profilesessions"
SCHEDULE_PLURAL = "profileschedules"
SESSION_KIND = "ProfileSession"
COMPONENT = "stepscope-operator"
# Kubernetes bounds Event notes to 1 KiB (events.k8s.io), so a message
# quoting an error is clipped here, where every Event is made.
EVENT_MESSAGE_MAX_LENGTH = 1024


def load_api_client() -> k8s.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG), with
    a connection for every blocking thread (`threads`)."""
    configuration = k8s.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException:
        # The client reads KUBECONFIG once, at import; read it now so a caller's value counts.
        k8s_config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    configuration.connection_pool_maxsize = BLOCKING_THREADS
    return k8s.ApiClient(configuration)


# Seconds one API request may take when the caller does not say (settings override it).
DEFAULT_REQUEST_TIMEOUT_SECONDS = 30.0


class KubeApi:
    """Every call passes `_request_timeout`: the client's default is to wait forever, and
    a session stuck on a stalled API server connection would never reach a final phase."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._batch = k8s.BatchV1Api(api_client)
        self._instance = socket.gethostname()
        self._timeout = {"_request_timeout": request_timeout_s}

    async def get_job(
        self, resource: JobResource, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """The target's job object; None when it (or its resource type) does not exist."""
        try:
            return await in_thread(
                namespace,
                self._custom.get_namespaced_custom_object,
                resource.group,
                resource.version,
                namespace,
                resource.plural,
                name,
                **self._timeout,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        def call() -> list[dict[str, Any]]:
            response = self._core.list_namespaced_pod(
                namespace, label_selector=label_selector, _preload_content=False, **self._timeout
            )
            return json.loads(response.data)["items"]

        return await in_thread(namespace, call)

    async def create_analysis_job(self, body: dict[str, Any]) -> bool:
        """Create the session's analysis Job; False when it exists already (a restart)."""
        try:
            await in_thread(
                body["metadata"]["namespace"],
                self._batch.create_namespaced_job,
                body["metadata"]["namespace"],
                body,
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def read_analysis_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        def call() -> dict[str, Any]:
            response = self._batch.read_namespaced_job(name, namespace, _preload_content=False)
            return json.loads(response.data)

        try:
            return await in_thread(namespace, call)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def delete_analysis_job(self, namespace: str, name: str) -> None:
        """Delete the Job and, in the background, its pods."""
        try:
            await in_thread(
                namespace,
                self._batch.delete_namespaced_job,
                name,
                namespace,
                propagation_policy="Background",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def list_sessions(
        self, namespace: str | None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        def call() -> list[dict[str, Any]]:
            options = {"label_selector": label_selector} if label_selector else {}
            options.update(self._timeout)
            if namespace:
                answer = self._custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, SESSION_PLURAL, **options
                )
            else:
                answer = self._custom.list_cluster_custom_object(
                    GROUP, VERSION, SESSION_PLURAL, **options
                )
            return answer["items"]

        return await in_thread(namespace or OPERATOR, call)

    async def create_session(self, body: dict[str, Any]) -> bool:
        """Create a session; False when one of that name exists already (a retried tick)."""
        try:
            await in_thread(
                body["metadata"]["namespace"],
                self._custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                body["metadata"]["namespace"],
                SESSION_PLURAL,
                body,
                **self._timeout,
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def delete_session(self, namespace: str, name: str) -> None:
        try:
            await in_thread(
                namespace,
                self._custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                SESSION_PLURAL,
                name,
                **self._timeout,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def patch_schedule_status(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        await in_thread(
            namespace,
            self._custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            SCHEDULE_PLURAL,
            name,
            {"status": status},
            **self._timeout,
        )

    async def get_session(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await in_thread(
                namespace,
                self._custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                SESSION_PLURAL,
                name,
                **self._timeout,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def patch_session_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the status subresource (lists such as conditions are replaced whole)."""
        await in_thread(
            namespace,
            self._custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            SESSION_PLURAL,
            name,
            {"status": status},
            **self._timeout,
        )

    async def post_event(self, body: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on a session or schedule, so `kubectl describe` tells the story."""
        meta = body["metadata"]
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": body.get("kind") or SESSION_KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": clip_text(message, EVENT_MESSAGE_MAX_LENGTH),
            "source": {"component": COMPONENT},
            "reportingComponent": f"{GROUP}/operator",
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await in_thread(
            meta["namespace"],
            self._core.create_namespaced_event,
            meta["namespace"],
            event,
            **self._timeout,
        )
