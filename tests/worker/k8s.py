"""Kubernetes mode's test parts, on the real control plane of tests/kube.py: a client of it, and a
kubelet played by hand for tests that step a pod through its life (their runner gives pods the
scheduler name ``HAND``, which kube-scheduler and KWOK's stages leave alone). It acts only through
the real API, as a scheduler (bind) and a kubelet (status writes, the grace-0 delete that ends a
graceful deletion) do; a pod's output is served by KWOK from a file named in a ``Logs`` object."""

import time
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client

from klique.worker.kubernetes.runner import KubernetesRunner
from tests.kube import HAND, Cluster, ignore_missing

__all__ = ["HAND", "Kubelet", "Runners", "eventually", "now"]


class Runners:
    """Makes runners as the worker's ServiceAccount (``defaults`` under each call's options, the
    namespace made ready first); ``close`` closes them and force-deletes the pods and Services they
    left (the session's cluster is shared)."""

    def __init__(self, cluster: Cluster, tag: str, **defaults):
        self.cluster, self.tag, self.defaults, self.made = cluster, tag, defaults, []

    def __call__(self, tag=None, api=None, **options) -> KubernetesRunner:
        options = {**self.defaults, **options}
        if options.get("namespace"):
            self.cluster.namespace(options["namespace"])
        runner = KubernetesRunner(api or self.cluster.worker(), tag=tag or self.tag, **options)
        self.made.append(runner)
        return runner

    def close(self) -> None:
        for runner in self.made:
            runner.close()
        core = self.cluster.core
        for tag in {runner.tag for runner in self.made}:
            selector = f"klique.io/worker={tag}"
            for pod in core.list_pod_for_all_namespaces(label_selector=selector).items:
                name, namespace = pod.metadata.name, pod.metadata.namespace
                ignore_missing(core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
            for service in core.list_service_for_all_namespaces(label_selector=selector).items:
                ignore_missing(
                    core.delete_namespaced_service, service.metadata.name, service.metadata.namespace
                )


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def eventually(condition, timeout: float = 15.0, what: str = "condition"):
    """Poll ``condition`` until it returns something true; its value. Fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Kubelet:
    """A kubelet (and scheduler) of node ``node``, driven step by step by a test."""

    PATCH = "application/strategic-merge-patch+json"

    def __init__(self, cluster: Cluster, folder: Path, node: str = "hand-node-1"):
        self.cluster, self.folder, self.node = cluster, folder, node
        self.api = cluster.core
        self.custom = client.CustomObjectsApi(cluster.admin())

    def pod(self, namespace: str, name: str) -> client.V1Pod:
        return self.api.read_namespaced_pod(name, namespace)

    def status(self, namespace: str, name: str, status: dict) -> None:
        self.api.patch_namespaced_pod_status(name, namespace, {"status": status}, _content_type=self.PATCH)

    def bind(self, namespace: str, name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        }
        # The client cannot read the Status a binding answers as a V1Binding: take it raw.
        self.api.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)

    def run(self, namespace: str, name: str) -> None:
        """Bind (if not yet) and start the container."""
        if not self.pod(namespace, name).spec.node_name:
            self.bind(namespace, name)
        container = {
            "name": "task",
            "ready": True,
            "restartCount": 0,
            "image": self.pod(namespace, name).spec.containers[0].image,
            "imageID": "",
            "state": {"running": {"startedAt": now()}},
        }
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": now()}
        self.status(
            namespace,
            name,
            {
                "phase": "Running",
                "hostIP": "10.0.0.1",
                "podIP": "10.1.0.7",
                "startTime": now(),
                "conditions": [ready],
                "containerStatuses": [container],
            },
        )

    def write_log(self, namespace: str, name: str, text: str) -> None:
        """The container's output so far: KWOK serves it (pods/log) from a file."""
        path = self.folder / f"{namespace}-{name}.log"
        first = not path.exists()
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        # A kubelet's container log file: CRI lines ("<time> stdout F <line>"), which KWOK parses.
        path.write_text("".join(f"{stamp} stdout F {line}\n" for line in text.splitlines()))
        if first:
            body = {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"logs": [{"containers": ["task"], "logsFile": str(path)}]},
            }
            self._serve_log(namespace, name, body, text)

    def _serve_log(self, namespace: str, name: str, body: dict, text: str) -> None:
        """Create the Logs object and wait for KWOK to serve it.

        KWOK learns of Logs objects through a watch; on a loaded machine an event can come late or,
        rarely, not at all (CI saw a 15 s wait run out), so the object is re-created once before failing.
        """
        custom, group = self.custom, ("kwok.x-k8s.io", "v1alpha1", namespace, "logs")

        def served() -> bool:
            return self.read_log(namespace, name) == text

        custom.create_namespaced_custom_object(*group, body)
        try:
            eventually(served, what=f"KWOK serving {name}'s log")
        except AssertionError:
            custom.delete_namespaced_custom_object(*group, name)
            custom.create_namespaced_custom_object(*group, body)
            eventually(served, timeout=30.0, what=f"KWOK serving {name}'s log")

    def read_log(self, namespace: str, name: str) -> str:
        try:
            answer = self.api.read_namespaced_pod_log(
                name, namespace, container="task", _preload_content=False
            )
            return answer.data.decode()
        except client.ApiException:
            return ""

    def exit(self, namespace: str, name: str, code: int, reason: str = "") -> None:
        ended = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "startedAt": now(),
            "finishedAt": now(),
        }
        container = {"name": "task", "ready": False, "restartCount": 0, "image": "", "imageID": ""}
        self.status(
            namespace,
            name,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [{**container, "state": {"terminated": ended}}],
            },
        )

    def finish_deletion(self, namespace: str, name: str) -> None:
        """What a kubelet does for a pod being deleted: SIGTERM took it (exit 143), then delete
        with grace 0."""
        assert self.pod(namespace, name).metadata.deletion_timestamp is not None
        self.exit(namespace, name, 143)
        self.api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def evict(self, namespace: str, name: str) -> None:
        """Node-pressure eviction: the pod fails with reason Evicted, its container killed."""
        ended = {"exitCode": 137, "reason": "ContainerStatusUnknown", "startedAt": now(), "finishedAt": now()}
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "lastTransitionTime": now(),
        }
        self.status(
            namespace,
            name,
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory.",
                "conditions": [disruption],
                "containerStatuses": [
                    {
                        "name": "task",
                        "ready": False,
                        "restartCount": 0,
                        "image": "",
                        "imageID": "",
                        "state": {"terminated": ended},
                    }
                ],
            },
        )


def exit_with(api: client.CoreV1Api, namespace: str, name: str, code: int) -> None:
    """The container of a pod KWOK runs exits with ``code`` (KWOK's klique-pod-exit stage)."""
    api.patch_namespaced_pod(
        name, namespace, {"metadata": {"annotations": {"klique.dev/exit-code": str(code)}}}
    )


def stop_takes(api: client.CoreV1Api, namespace: str, name: str, milliseconds: int) -> None:
    """The container of a pod KWOK runs takes this long to end after SIGTERM (default 300 ms)."""
    api.patch_namespaced_pod(
        name, namespace, {"metadata": {"annotations": {"klique.dev/stop-ms": str(milliseconds)}}}
    )
