"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and KWOK's GPU nodes, built from Go modules and started by
deploy/k8s-dev/start.sh once per test session (per xdist worker), stopped at its end.

``KLIQUE_TEST_KUBECONFIG`` runs the same tests against another cluster (kind, a real one) that has
KWOK's nodes and stages applied (docs/workers-kubernetes.md); then nothing is started and the tests
that compact etcd are skipped. The worker's RBAC is the one in deploy/kubernetes/: each namespace a
test uses gets role.yaml's Role bound to the ``klique-worker`` ServiceAccount, whose token the
runner uses, so every call the runner makes passes the real authorizer or fails the test."""

import base64
import copy
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "deploy" / "k8s-dev"
MANIFESTS = ROOT / "deploy" / "kubernetes"
WORKER_NAMESPACE, WORKER_ACCOUNT = "klique", "klique-worker"
# Pods of this scheduler are left alone by KWOK's stages and by kube-scheduler: tests that play
# scheduler and kubelet step by step (bind, run, exit) give it to their runner.
HAND = "klique-hand"


def manifests(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


@dataclass
class Cluster:
    kubeconfig: Path
    folder: Path | None = None  # set when this session started it (etcd can then be compacted)
    namespaces: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        loaded = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=loaded)
        self.configuration = loaded
        self.server = loaded.host
        self.core = client.CoreV1Api(self.admin())

    def admin(self) -> client.ApiClient:
        """A client with the cluster's admin credentials (a test's own hands)."""
        return client.ApiClient(copy.deepcopy(self.configuration))

    def worker(self, host: str | None = None) -> client.ApiClient:
        """A client of the worker's ServiceAccount (a fresh token), at ``host`` (a proxy) or the
        API server."""
        token = self.core.create_namespaced_service_account_token(
            WORKER_ACCOUNT, WORKER_NAMESPACE, {"spec": {"expirationSeconds": 3600}}
        ).status.token
        configuration = client.Configuration()
        configuration.host = host or self.server
        configuration.ssl_ca_cert = self.configuration.ssl_ca_cert
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(configuration)

    def worker_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file of the worker's ServiceAccount (a fresh token), for a daemon process."""
        worker = self.worker().configuration
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "dev",
                            "cluster": {"server": self.server, "certificate-authority": worker.ssl_ca_cert},
                        }
                    ],
                    "users": [
                        {
                            "name": "worker",
                            "user": {"token": worker.api_key["authorization"].removeprefix("Bearer ")},
                        }
                    ],
                    "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "worker"}}],
                    "current-context": "dev",
                }
            )
        )
        return path

    def install_worker_rbac(self) -> None:
        """deploy/kubernetes's namespace, ServiceAccount and ClusterRoles, as IT applies them."""
        for name in ("namespace.yaml", "serviceaccount.yaml", "cluster-role.yaml", "node-reader.yaml"):
            self.apply(manifests(name))
        self.namespace("default")

    def namespace(self, name: str) -> str:
        """Namespace ``name`` exists and the worker holds role.yaml's Role in it."""
        with self.lock:
            if name in self.namespaces:
                return name
            self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
            for document in manifests("role.yaml"):
                document["metadata"]["namespace"] = name
                self.apply([document])
            # A pod needs its namespace's "default" ServiceAccount, which the controller manager
            # makes a moment after the namespace (under load, after a test's first create).
            deadline = time.monotonic() + 60
            while ignore_missing(self.core.read_namespaced_service_account, "default", name) is None:
                assert time.monotonic() < deadline, f"no default ServiceAccount in {name} after 60 s"
                time.sleep(0.1)
            self.namespaces.add(name)
        return name

    def apply(self, documents: list[dict]) -> None:
        for document in documents:
            self.kubectl(
                "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump(document)
            )

    @property
    def kubectl_path(self) -> str:
        """The kubectl built with the control plane (same release), else the one on PATH."""
        if self.folder is not None and (self.folder / "bin.path").exists():
            return str(Path((self.folder / "bin.path").read_text().strip()) / "kubectl")
        return shutil.which("kubectl") or "kubectl"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 or not check, done.stderr
        return done.stdout if check else done.stdout + done.stderr

    def compact(self) -> None:
        """Compact etcd to its current revision: every resourceVersion before now is gone (a watch
        resumed from one is answered 410 Gone)."""
        assert self.folder is not None, "etcd can be compacted only in a control plane this session started"
        # Two writes first (to etcd itself: the API server may be down): a watcher that saw
        # everything up to now resumes at the revision after its last, which must be below the
        # compacted one for the server to answer 410.
        url = (self.folder / "etcd.url").read_text().strip()
        marker = base64.b64encode(b"/klique-test/compaction-marker").decode()
        for value in (b"1", b"2"):
            put = {"key": marker, "value": base64.b64encode(value).decode()}
            httpx.post(f"{url}/v3/kv/put", json=put, timeout=10).raise_for_status()
        key = base64.b64encode(b"/").decode()
        answer = httpx.post(f"{url}/v3/kv/range", json={"key": key}, timeout=10).json()
        compaction = {"revision": answer["header"]["revision"], "physical": True}
        httpx.post(f"{url}/v3/kv/compaction", json=compaction, timeout=30).raise_for_status()


def restart_apiserver(cluster: Cluster) -> None:
    """Stop the API server and start it again (deploy/k8s-dev/restart.sh); back once ready."""
    done = subprocess.run(
        [SCRIPTS / "restart.sh", cluster.folder], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]


def start(folder: Path) -> Cluster:
    done = subprocess.run(
        [SCRIPTS / "start.sh", folder], capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        subprocess.run([SCRIPTS / "stop.sh", folder], capture_output=True, timeout=60, check=False)
        raise AssertionError(f"deploy/k8s-dev/start.sh failed:\n{done.stderr[-4000:]}")
    cluster = Cluster(folder / "admin.kubeconfig", folder=folder)
    cluster.install_worker_rbac()
    return cluster


def stop(cluster: Cluster) -> None:
    if cluster.folder is not None:
        subprocess.run([SCRIPTS / "stop.sh", cluster.folder], capture_output=True, timeout=60, check=False)


def missing_tools() -> str:
    """Why this machine cannot start the control plane ('' when it can)."""
    if os.environ.get("KLIQUE_TEST_KUBECONFIG"):
        return ""
    needed = {
        "go": "Go 1.24+ (its module proxy builds the control plane)",
        "openssl": "openssl",
        "curl": "curl",
    }
    lacking = [what for tool, what in needed.items() if shutil.which(tool) is None]
    return f"needs {', '.join(lacking)} for the Kubernetes control plane (deploy/k8s-dev)" if lacking else ""


class FaultProxy:
    """A TCP proxy in front of the API server (TLS passes through untouched) that can cut every
    open connection (``cut``: a watch drops) and refuse new ones (``refuse``: the server
    unreachable). The faults are the network's; every answer is the real API server's."""

    def __init__(self, server: str):
        host, _, port = server.removeprefix("https://").partition(":")
        self.upstream = (host, int(port or 443))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.refusing = False
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.open |= {downstream, upstream}
            for source, target in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self.pump, args=(source, target), daemon=True).start()

    def pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            self.close(end)

    def close(self, end: socket.socket) -> None:
        with self.lock:
            self.open.discard(end)
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        end.close()

    def cut(self) -> None:
        with self.lock:
            ends = list(self.open)
        for end in ends:
            self.close(end)

    def refuse(self, refusing: bool) -> None:
        self.refusing = refusing

    def shutdown(self) -> None:
        self.listener.close()
        self.cut()


def ignore_missing(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except ApiException as error:
        if error.status != 404:
            raise
