"""Kubernetes mode's test parts: the k8s-dev API server (deploy/k8s-dev/apiserver.py) on a free
port, a client for it, and a fake kubelet that acts only through the API, as a kubelet (and the
scheduler, for PodScheduled) does: bind, status writes, and the grace-0 delete that ends a graceful
deletion. The container's output is the one thing set outside the API (``/klique-dev/``)."""

import importlib.util
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def apiserver_module():
    spec = importlib.util.spec_from_file_location("k8s_dev_apiserver", ROOT / "deploy/k8s-dev/apiserver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_apiserver(**options):
    """The k8s-dev API server serving on a free port in this process (real HTTP)."""
    return apiserver_module().ApiServer(("127.0.0.1", 0), **options).start()


def api_client(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


def kubeconfig(path: Path, url: str, context: str = "dev") -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: dev\n  cluster:\n    server: {url}\n"
        f"contexts:\n- name: {context}\n  context:\n    cluster: dev\n    user: dev\n"
        f"current-context: {context}\n"
        "users:\n- name: dev\n  user:\n    token: dev-token\n"
    )
    return path


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

    def __init__(self, url: str, node: str = "gpu-node-1"):
        self.url, self.node = url, node
        self.api = client.CoreV1Api(api_client(url))

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

    def unschedulable(self, namespace: str, name: str, message: str = UNSCHEDULABLE) -> None:
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": now(),
        }
        self.status(namespace, name, {"conditions": [condition]})

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
        answer = httpx.put(f"{self.url}/klique-dev/namespaces/{namespace}/pods/{name}/log", content=text)
        answer.raise_for_status()

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
