"""Kubernetes mode: each claimed task becomes pods (one per node, ``restartPolicy: Never``) in the
task's namespace, built with the official ``kubernetes`` client (in-cluster config or a kubeconfig).

The daemon follows its pods with one watch per namespace in use (label ``klique.io/worker=<tag>``),
resumed from the last resourceVersion after a drop and re-listed when the server answers 410 Gone.
A background thread per namespace feeds a queue; ``poll`` only drains it:

- ``running`` once every pod of the task runs; ``exited`` with the container's exit code when a pod
  ends (several nodes: the first non-zero code, else 0 once all succeeded), its log tail read first;
- ``failed`` when the pods are still pending past the pending timeout because no node can take
  them (the scheduler's message) or their image cannot be pulled; ``released`` when pending past
  it for another reason, and when someone else deletes or evicts a pod (the pool took it back):
  then once every pod of the task is over (a drain's or an eviction's grace is let run, the other
  pods get the task's grace), never while a container of it may still run.

A pending pod is counted and charged from placement, like any placed task; the pending timeout
bounds that. ``terminate`` deletes the pods with the profile's grace period (the kubelet sends
SIGTERM, then SIGKILL); ``kill`` deletes them again with 1 s of grace. The runner never
force-deletes (grace 0): that forgets a pod whose container may still run. A delete that fails is
tried again from ``poll`` with a backoff until it succeeds; deletes name the pod's uid, so a
later pod of the same name is never hit. A pod create that fails (its answer lost, say) is
followed by a sweep of the task's pods and Service carrying this worker's tag. After a daemon
restart ``recover`` finds the pods by the worker label (with each task's pool label), and
``adopt`` keeps following those the control plane handed back and deletes those the daemon drops
(another pool's, under the same hostname, are left alone).

Each API call made on the daemon's thread is tried once and waits at most ``API_TIMEOUT_S``.

Several nodes: pods ``klique-<task>-<index>`` with hostname/subdomain set, and a headless Service
``klique-<task>`` for rendezvous (``KLIQUE_MASTER_ADDR=klique-<task>-0.klique-<task>``).
"""

import json
import logging
import math
import queue
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from klique.worker import kube_nodes
from klique.worker.runs import Change, StartFailed, env, task_variables

log = logging.getLogger("klique.worker")

MANAGED_BY = "app.kubernetes.io/managed-by"
WORKER, TASK, NODE_INDEX = "klique.io/worker", "klique.io/task", "klique.io/node-index"
POOL = "klique.io/pool"
CONTAINER = "task"
CHECKPOINT_MOUNT = "/klique/checkpoints"
TAIL_LINES = 200
KEPT_TAILS = 256
# Waiting reasons of a scheduled pod that will not go away by waiting: the task's image or config.
HOPELESS_WAITING = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
}
# One API call made on the daemon's thread waits at most this long (connect and answer together),
# well within the control plane's heartbeat timeout (30 s).
API_TIMEOUT_S = 10
# The shortest grace a delete asks for: 0 is a force delete, which forgets the pod at once whether
# or not its kubelet has stopped the container; 1 s has the kubelet SIGKILL it, then remove it.
KILL_GRACE_S = 1
RETRY_MIN_S, RETRY_MAX_S = 0.5, 30.0
TERMINAL = {"Succeeded", "Failed"}


@dataclass
class PodSeen:
    """What the runner last saw of one pod."""

    uid: str = ""
    phase: str = "Pending"
    node: str = ""
    running: bool = False
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    unschedulable: bool = False
    hopeless: bool = False
    disrupted: bool = False
    deleting: bool = False
    deleted: bool = False

    @property
    def over(self) -> bool:
        """Its container will not run again: the pod is gone or has ended."""
        return self.deleted or self.phase in TERMINAL


@dataclass
class Work:
    """A task's pods, followed until they ended."""

    task_id: int
    namespace: str
    pods: dict[str, PodSeen]
    since: float
    grace: int = 30
    service: bool = False
    announced: bool = False
    stopping: bool = False
    killed: bool = False
    ended: bool = False
    lost: str | None = None  # why the pool took a pod back: released once every pod is over


@dataclass
class Retry:
    """A delete that failed (the API server unreachable or refusing), tried again from ``poll``.
    ``kind`` "sweep" lists the task's pods and Service carrying this worker's tag and deletes them."""

    kind: str
    namespace: str
    name: str
    task_id: int
    grace: int = KILL_GRACE_S
    uid: str = ""
    failures: int = 0
    due: float = 0.0
    busy: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.namespace, self.name


@dataclass
class Watcher:
    namespace: str
    thread: threading.Thread
    stop: threading.Event = field(default_factory=threading.Event)
    stream: watch.Watch | None = None
    healthy: bool = False  # listed, and no error since: what the runner knows of the pods is current


def label_value(text: str) -> str:
    """``text`` as a valid label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", str(text))[:63]
    return value.strip("-._") or "worker"


def node_count(task: dict) -> int:
    """The task's ``nodes``: a whole number of at least 1 (1 when not given), else a recurring
    StartFailed."""
    nodes = task.get("nodes")
    if nodes is None:
        return 1
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise StartFailed(f"nodes must be a whole number of at least 1, not {nodes!r}", recurs=True)
    return nodes


def grace_seconds(runtime: dict) -> int:
    """The profile's stop grace as whole seconds for a pod (at least ``KILL_GRACE_S``)."""
    try:
        return max(KILL_GRACE_S, math.ceil(float(runtime.get("grace_s"))))
    except (TypeError, ValueError):
        return 30


def timed_out(error: Exception) -> bool:
    """A call that waited its whole timeout (the API server slow or unreachable)."""
    reason = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) else error
    return isinstance(reason, (urllib3.exceptions.TimeoutError, TimeoutError))


def uids(work: "Work") -> dict[str, str]:
    return {name: seen.uid for name, seen in work.pods.items() if seen.uid}


def pod_name(task_id: int, index: int) -> str:
    return f"klique-{task_id}-{index}"


def summarise(pod: dict) -> PodSeen:
    """A pod (as the API serves it) in the terms the runner acts on."""
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    seen = PodSeen(
        uid=metadata.get("uid") or "",
        phase=status.get("phase") or "Pending",
        node=spec.get("nodeName") or "",
        deleting=bool(metadata.get("deletionTimestamp")),
    )
    containers = [item for item in status.get("containerStatuses") or [] if item.get("name") == CONTAINER]
    state = (containers[0].get("state") or {}) if containers else {}
    if state.get("terminated"):
        ended = state["terminated"]
        seen.exit_code = int(ended.get("exitCode") or 0)
        seen.reason, seen.message = ended.get("reason") or "", ended.get("message") or ""
    elif seen.phase == "Succeeded":
        seen.exit_code = 0
    seen.running = bool(state.get("running")) or (seen.phase == "Running" and not containers)
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in HOPELESS_WAITING:
        seen.hopeless = True
        seen.reason, seen.message = waiting["reason"], waiting.get("message") or waiting["reason"]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            seen.unschedulable = condition.get("reason") == "Unschedulable"
            seen.message = seen.message or condition.get("message") or condition.get("reason") or ""
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            seen.disrupted = True
            seen.reason = seen.reason or condition.get("reason") or ""
    if status.get("reason") == "Evicted" or (seen.phase == "Failed" and seen.exit_code is None):
        seen.disrupted = True
        seen.reason = status.get("reason") or seen.reason
        seen.message = status.get("message") or seen.message
    return seen


class KubernetesRunner:
    mode = "kubernetes"
    claims_total = True  # the Kubernetes scheduler picks the GPUs
    multi_node = True  # one pod per node and a headless Service
    whole_gpus = False  # a fraction is an extended resource IT maps (MIG slice, shared GPU)

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        tag: str,
        namespace: str = "default",
        pending_timeout_s: float = 300,
        checkpoint_pvc: str = "",
        image: str = "",
        service_account: str = "",
        scheduler_name: str = "",
        node_selector: dict[str, str] | None = None,
        watch_timeout_s: float = 300,
        clock=time.monotonic,
    ):
        # One try per call: urllib3 would try a connection (and an idempotent call's answer) four
        # times, each with the full API_TIMEOUT_S.
        api_client.rest_client.pool_manager.connection_pool_kw["retries"] = urllib3.Retry(0)
        api_client.rest_client.pool_manager.clear()
        self.api = client.CoreV1Api(api_client)
        self.tag = label_value(tag)
        self.namespace = namespace or "default"
        self.pending_timeout_s, self.checkpoint_pvc = pending_timeout_s, checkpoint_pvc
        self.image, self.service_account, self.scheduler_name = image, service_account, scheduler_name
        self.node_selector = dict(node_selector or {})
        self.watch_timeout_s, self.clock = watch_timeout_s, clock
        self.works: dict[int, Work] = {}
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.watchers: dict[str, Watcher] = {}
        self.tails: OrderedDict[int, str] = OrderedDict()
        self.recovered: dict[int, list[dict]] = {}
        self.retries: dict[tuple[str, str, str], Retry] = {}
        self.lock = threading.Lock()  # guards ``retries`` (background threads retry deletes)
        self.background = ThreadPoolExecutor(max_workers=2, thread_name_prefix="klique-k8s")

    # CLI wiring.

    # flag, its variable, default, help: the options that take a string.
    STRING_OPTIONS = (
        (
            "--kubeconfig",
            "KLIQUE_KUBE_CONFIG",
            "",
            "kubeconfig file; in-cluster config when not given and the daemon runs in a pod "
            "(else KUBECONFIG, ~/.kube/config)",
        ),
        ("--kube-context", "KLIQUE_KUBE_CONTEXT", "", "context of the kubeconfig"),
        ("--kube-namespace", "KLIQUE_KUBE_NAMESPACE", "default", "namespace of tasks whose pool sets none"),
        (
            "--kube-checkpoint-pvc",
            "KLIQUE_KUBE_CHECKPOINT_PVC",
            "",
            f"a PersistentVolumeClaim mounted at {CHECKPOINT_MOUNT} in every task pod; "
            f"KLIQUE_CHECKPOINT_DIR is {CHECKPOINT_MOUNT}/<task>",
        ),
        ("--kube-image", "KLIQUE_KUBE_IMAGE", "", "image of tasks whose spec and profile name none"),
        (
            "--kube-service-account",
            "KLIQUE_KUBE_SERVICE_ACCOUNT",
            "",
            "service account of task pods (default: none mounted)",
        ),
        (
            "--kube-node-selector",
            "KLIQUE_KUBE_NODE_SELECTOR",
            "",
            "key=value[,key=value]: the nodes task pods may go to (their nodeSelector), whose "
            "allocatable nvidia.com/gpu the daemon reports as the GPUs it has",
        ),
        (
            "--kube-scheduler-name",
            "KLIQUE_KUBE_SCHEDULER_NAME",
            "",
            "schedulerName of task pods, for a gang or GPU scheduler (KAI-Scheduler, Volcano); "
            "default: the cluster's default scheduler",
        ),
    )

    @classmethod
    def add_arguments(cls, group) -> None:
        for flag, variable, default, text in cls.STRING_OPTIONS:
            group.add_argument(flag, default=env(variable, default), help=f"{text} [{variable}]")
        group.add_argument(
            "--kube-pending-timeout",
            type=float,
            default=float(env("KLIQUE_KUBE_PENDING_TIMEOUT_S", 300)),
            help="fail (unschedulable) or release a task whose pods are not all running this long after "
            "creation (seconds; counted and charged while pending) [KLIQUE_KUBE_PENDING_TIMEOUT_S]",
        )

    @classmethod
    def from_args(cls, args, *, state_dir: Path, checkpoint_root: Path, hostname: str) -> "KubernetesRunner":
        return cls(
            api_client(args.kubeconfig, args.kube_context),
            tag=hostname,
            namespace=args.kube_namespace,
            pending_timeout_s=args.kube_pending_timeout,
            checkpoint_pvc=args.kube_checkpoint_pvc,
            image=args.kube_image,
            service_account=args.kube_service_account,
            scheduler_name=args.kube_scheduler_name,
            node_selector=kube_nodes.node_selector(args.kube_node_selector),
        )

    # Starting work.

    def start(self, task: dict, devices: list[str]) -> None:
        task_id = int(task["id"])
        runtime = task.get("runtime") or {}
        namespace = runtime.get("namespace") or self.namespace
        nodes = node_count(task)
        pods = [self.pod(task, index, nodes) for index in range(nodes)]
        pods_seen = {pod["metadata"]["name"]: PodSeen() for pod in pods}
        work = Work(task_id, namespace, pods_seen, self.clock(), grace=grace_seconds(runtime))
        self.forget_retries(task_id)
        self.follow(namespace)
        try:
            if nodes > 1:
                self.api.create_namespaced_service(
                    namespace, self.service(task), _request_timeout=API_TIMEOUT_S
                )
                work.service = True
            for pod in pods:
                answer = self.api.create_namespaced_pod(namespace, pod, _request_timeout=API_TIMEOUT_S)
                work.pods[pod["metadata"]["name"]].uid = answer.metadata.uid
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            # What was created, even by a create whose answer was lost, carries this worker's tag.
            if timed_out(error):  # one call's wait is all the daemon's thread gives: sweep from poll
                self.failed(Retry("sweep", namespace, str(task_id), task_id), str(error))
            else:
                self.sweep(namespace, task_id)
            raise self.start_failure(error) from error
        work.since = self.clock()
        self.works[task_id] = work
        self.tails.pop(task_id, None)
        fields = {"task": task_id, "namespace": namespace, "pods": ",".join(work.pods), "nodes": nodes}
        log.info("pods created", extra={"fields": fields})

    def start_failure(self, error: Exception) -> StartFailed:
        """An API refusal of the task's own making (422 Invalid, 400) recurs wherever it runs.
        Anything else is this worker's trouble and hands the task back: a pod of an earlier run
        still there (409; ours were swept, another worker's is left to end on its own), 403 from
        RBAC, a missing namespace, the API server unreachable."""
        if not isinstance(error, ApiException):
            return StartFailed(f"Kubernetes API unreachable: {error}", recurs=False)
        message = api_message(error)
        if error.status == 409:
            return StartFailed(f"an earlier run of this task is still there: {message}", recurs=False)
        return StartFailed(f"Kubernetes refused the pod: {message}", recurs=error.status in (400, 422))

    def pod(self, task: dict, index: int, nodes: int) -> dict:
        task_id = int(task["id"])
        runtime = task.get("runtime") or {}
        spec = task.get("spec") or {}
        image = runtime.get("image") or (spec.get("image") if isinstance(spec, dict) else "") or self.image
        if not image:
            raise StartFailed(
                "no image: set spec.image, the profile's default image or --kube-image", recurs=True
            )
        checkpoints = Path(CHECKPOINT_MOUNT) / str(task_id)
        variables = task_variables(task, checkpoints)
        if not self.checkpoint_pvc:
            variables.pop("KLIQUE_CHECKPOINT_DIR", None)
        variables.update(KLIQUE_NODES=str(nodes), KLIQUE_NODE_INDEX=str(index))
        if nodes > 1:
            variables["KLIQUE_MASTER_ADDR"] = f"klique-{task_id}-0.klique-{task_id}"
        container = {
            "name": CONTAINER,
            "image": image,
            "command": ["/bin/sh", "-c", task["command"]],
            "env": [{"name": name, "value": value} for name, value in variables.items()],
            "resources": self.resources(task, runtime, spec),
        }
        grace = runtime.get("grace_s")
        pod_spec = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": math.ceil(float(grace)) if grace is not None else 30,
            "containers": [container],
            "automountServiceAccountToken": bool(self.service_account),
        }
        if self.service_account:
            pod_spec["serviceAccountName"] = self.service_account
        if self.scheduler_name:
            pod_spec["schedulerName"] = self.scheduler_name
        if self.node_selector:
            pod_spec["nodeSelector"] = dict(self.node_selector)
        if self.checkpoint_pvc:
            pod_spec["volumes"] = [
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": self.checkpoint_pvc}}
            ]
            container["volumeMounts"] = [{"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}]
        if nodes > 1:
            pod_spec.update(hostname=pod_name(task_id, index), subdomain=f"klique-{task_id}")
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name(task_id, index), "labels": self.labels(task, index)},
            "spec": pod_spec,
        }

    def labels(self, task: dict, index: int | None = None) -> dict[str, str]:
        labels = {MANAGED_BY: "klique", WORKER: self.tag, TASK: str(task["id"])}
        for name in ("pool", "group", "project", "user"):
            value = (task.get("labels") or {}).get(name)
            if value:
                labels[f"klique.io/{name}"] = label_value(value)
        if index is not None:
            labels[NODE_INDEX] = str(index)
        return labels

    def resources(self, task: dict, runtime: dict, spec: dict) -> dict:
        """The GPU as an extended resource limit, and the spec's cpu/memory as requests and limits
        (the profile's memory cap as memory limit when the spec sets none)."""
        try:
            gpus = Decimal(str(task.get("gpus") or 0))
        except InvalidOperation:
            raise StartFailed(f"gpus is not a number: {task.get('gpus')!r}", recurs=True) from None
        if "gpu_resource" in runtime:
            resource, count = runtime.get("gpu_resource") or "", int(runtime.get("gpu_count") or 0)
        else:  # a control plane that sends no runtime: whole GPUs only
            resource, count = ("nvidia.com/gpu", int(gpus)) if gpus == int(gpus) else ("", 0)
        if gpus > 0 and (not resource or count <= 0):
            raise StartFailed(
                f"this profile's {gpus} GPU has no Kubernetes resource mapped on this pool: IT must map an "
                "extended resource (a MIG slice such as nvidia.com/mig-1g.10gb, or a shared-GPU resource) "
                "for the profile on this pool in the admin",
                recurs=True,
            )
        requests, limits = {}, {}
        if resource and count > 0:
            limits[resource] = str(count)
        wanted = (spec.get("resources") if isinstance(spec, dict) else None) or {}
        for name in ("cpu", "memory"):
            if wanted.get(name):
                requests[name] = limits[name] = str(wanted[name]).strip()
        if "memory" not in limits and runtime.get("memory_limit_mb"):
            limits["memory"] = f"{int(runtime['memory_limit_mb'])}Mi"
        return {name: value for name, value in (("limits", limits), ("requests", requests)) if value}

    def service(self, task: dict) -> dict:
        task_id = int(task["id"])
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"klique-{task_id}", "labels": self.labels(task)},
            "spec": {
                "clusterIP": "None",
                "selector": {WORKER: self.tag, TASK: str(task_id)},
                "publishNotReadyAddresses": True,
            },
        }

    # Following work.

    def poll(self) -> list[Change]:
        self.retry_due()
        # Which watches are current, read before the queue is drained: a watch marks itself healthy
        # only after queueing the event it read, so every event from before that is drained here.
        # Read after, a pod's start queued meanwhile would be judged on what came before it.
        current = {namespace for namespace, watcher in self.watchers.items() if watcher.healthy}
        while True:
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                break
            self.apply(*item)
        changes = []
        for work in list(self.works.values()):
            changes += self.changes(work, self.clock(), work.namespace in current)
            if work.ended:
                del self.works[work.task_id]
        return changes

    def apply(
        self, what: str, namespace: str, payload, tail: str | None = None, listed_at: float = 0
    ) -> None:
        if what == "listed":
            for work in self.works.values():
                if work.namespace != namespace:
                    continue
                for name, seen in work.pods.items():
                    if name in payload or seen.deleted:
                        continue
                    if work.since <= listed_at:
                        seen.deleted = True
                    else:
                        # Created while the list was on its way: listed before it existed, or
                        # deleted before the list was taken, which no watch event then tells. Ask.
                        self.submit(self.confirm_gone, namespace, work.task_id, name, seen.uid)
            return
        if what == "gone":
            name, uid = payload
            for work in self.works.values():
                seen = work.pods.get(name) if work.namespace == namespace else None
                if seen is not None and seen.uid == uid:
                    seen.deleted = True
            return
        event_type, pod = what, payload
        metadata = pod.get("metadata") or {}
        try:
            task_id = int((metadata.get("labels") or {}).get(TASK, ""))
        except ValueError:
            return
        if tail is not None:
            self.keep_tail(task_id, tail)
        work = self.works.get(task_id)
        name = metadata.get("name")
        if work is None or work.namespace != namespace or name not in work.pods:
            return
        known = work.pods[name]
        if known.uid and metadata.get("uid") != known.uid:
            return  # an earlier pod of the same name
        seen = summarise(pod)
        seen.deleted = event_type == "DELETED"
        if known.exit_code is not None and seen.exit_code is None:
            seen.exit_code = known.exit_code
        work.pods[name] = seen

    def changes(self, work: Work, now: float, current: bool) -> list[Change]:
        """What the task's pods now say; ``current``: its namespace's watch was healthy before this
        poll drained the events (only then is a pending timeout judged)."""
        pods = list(work.pods.values())
        detail = {
            "namespace": work.namespace,
            "pods": ",".join(work.pods),
            "node": pods[0].node if pods else "",
        }
        if work.stopping:
            if all(seen.deleted for seen in pods):
                codes = [seen.exit_code for seen in pods if seen.exit_code is not None]
                code = next((c for c in codes if c), 0) if codes else (137 if work.killed else 143)
                return self.end(work, Change(work.task_id, "exited", code, detail), remove=False)
            return []
        lost = [
            seen
            for seen in pods
            if seen.disrupted or seen.deleting or (seen.deleted and seen.exit_code is None)
        ]
        if lost:
            # The pool takes the task back: a pod evicted, drained or deleted by someone else keeps
            # its grace, the task's other pods get theirs, and the task is handed back only once no
            # container of it runs any more (never two runs of one task at once).
            if work.lost is None:
                work.lost = lost[0].reason or ("deleted" if lost[0].deleted or lost[0].deleting else "")
                rest = [name for name, seen in work.pods.items() if not seen.over and not seen.deleting]
                if rest:
                    self.submit(
                        self.remove,
                        work.namespace,
                        work.task_id,
                        rest,
                        False,
                        grace=work.grace,
                        uids=uids(work),
                    )
            if not all(seen.over for seen in pods):
                return []
            return self.end(work, Change(work.task_id, "released", detail={**detail, "reason": work.lost}))
        codes = [seen.exit_code for seen in pods]
        failed_code = next((code for code in codes if code), None)
        if failed_code is not None or all(code == 0 for code in codes):
            started = [] if work.announced else [Change(work.task_id, "running", detail=detail)]
            work.announced = True
            code = failed_code if failed_code is not None else 0
            return started + self.end(work, Change(work.task_id, "exited", code, detail))
        if not work.announced and all(seen.running or seen.exit_code == 0 for seen in pods):
            work.announced = True
            return [Change(work.task_id, "running", detail=detail)]
        if not work.announced and current and now - work.since > self.pending_timeout_s:
            stuck = [seen for seen in pods if not seen.running and seen.exit_code is None]
            hopeless = [seen for seen in stuck if seen.unschedulable or seen.hopeless]
            waited = f"not running {self.pending_timeout_s:g} s after creation"
            if hopeless:
                error = f"{waited}: {hopeless[0].message or hopeless[0].reason}"
                return self.end(work, Change(work.task_id, "failed", detail={**detail, "error": error}))
            reason = next((seen.message for seen in stuck if seen.message), "") or "pending"
            return self.end(
                work, Change(work.task_id, "released", detail={**detail, "reason": f"{waited}: {reason}"})
            )
        return []

    def end(self, work: Work, change: Change, *, remove: bool = True) -> list[Change]:
        """The task's work is over: forget it, and delete what is left of it in the background."""
        work.ended = True
        names = [name for name, seen in work.pods.items() if not seen.deleted] if remove else []
        if names or work.service:
            self.submit(
                self.remove,
                work.namespace,
                work.task_id,
                names,
                work.service,
                grace=KILL_GRACE_S,
                uids=uids(work),
            )
        return [change]

    def submit(self, call, *args, **kwargs) -> None:
        try:
            self.background.submit(call, *args, **kwargs)
        except RuntimeError:  # closed
            pass

    def terminate(self, task_id: int, grace_s: float) -> None:
        work = self.works.get(task_id)
        if work is None:
            return
        work.stopping = True
        names = [name for name, seen in work.pods.items() if not seen.deleted]
        # The output so far: a kubelet deletes the pod (and its log) right after the container ends,
        # which may be before the watch sees it end.
        reachable, tail = True, None
        try:
            tail = self.fetch_tail(work.namespace, pod_name(task_id, 0)) if names else None
        except ApiException:
            pass
        except (urllib3.exceptions.HTTPError, OSError):
            reachable = False  # the deletes wait for poll: one call's wait is all this gives
        if tail:
            self.keep_tail(task_id, tail)
        grace = max(KILL_GRACE_S, math.ceil(grace_s))
        self.remove(
            work.namespace, task_id, names, work.service, grace=grace, uids=uids(work), reachable=reachable
        )

    def kill(self, task_id: int) -> None:
        """The grace is over: delete again with the shortest grace (the kubelet SIGKILLs the
        container, then removes the pod). Never a force delete (grace 0): that forgets a pod whose
        container may still run. A pod whose node is gone stays until the node controller removes
        it (or an admin force-deletes it); forcing it here when its node is NotReady is not done."""
        work = self.works.get(task_id)
        if work is None:
            return
        work.stopping = work.killed = True
        names = [name for name, seen in work.pods.items() if not seen.deleted]
        self.remove(work.namespace, task_id, names, work.service, grace=KILL_GRACE_S, uids=uids(work))

    def remove(
        self,
        namespace: str,
        task_id: int,
        names: list[str],
        service: bool,
        *,
        grace: int = KILL_GRACE_S,
        uids: dict[str, str] | None = None,
        reachable: bool = True,
    ) -> None:
        """Delete pods (with ``grace``, each only if it still has the uid known of it) and the
        task's Service. Gone already is fine; a delete that fails is tried again from ``poll`` until
        it succeeds, and once the API server does not answer the rest wait for that too, so one
        call (``API_TIMEOUT_S``) is the most this waits on an unreachable server."""
        retries = [
            Retry("pod", namespace, name, task_id, grace, (uids or {}).get(name, "")) for name in names
        ]
        if service:
            retries.append(Retry("service", namespace, f"klique-{task_id}", task_id, grace))
        for retry in retries:
            if reachable:
                reachable = self.delete(retry) != "unreachable"
            else:
                self.failed(retry, "the API server did not answer")

    def delete(self, retry: Retry) -> str:
        """One delete: "done" (or gone already, or the name is another object's now), "refused"
        or "unreachable" (both kept to retry)."""
        call = self.api.delete_namespaced_pod if retry.kind == "pod" else self.api.delete_namespaced_service
        # The grace goes in the body: a real API server reads a DELETE's options from its body when
        # it has one, and the query's gracePeriodSeconds is then not applied.
        body = {"gracePeriodSeconds": retry.grace}
        if retry.uid:
            body["preconditions"] = {"uid": retry.uid}
        try:
            call(
                retry.name,
                retry.namespace,
                grace_period_seconds=retry.grace,
                body=body,
                _request_timeout=API_TIMEOUT_S,
            )
        except ApiException as error:
            if error.status not in (404, 409):
                self.failed(retry, api_message(error))
                return "refused"
        except (urllib3.exceptions.HTTPError, OSError) as error:
            self.failed(retry, str(error))
            return "unreachable"
        with self.lock:
            known = self.retries.get(retry.key)
            if known is not None and known.grace >= retry.grace:
                del self.retries[retry.key]
        return "done"

    def failed(self, retry: Retry, error: str) -> None:
        """Keep ``retry`` to try again after a backoff (merged with one kept already)."""
        with self.lock:
            kept = self.retries.setdefault(retry.key, retry)
            if kept is not retry:
                kept.grace, kept.uid = min(kept.grace, retry.grace), retry.uid or kept.uid
            kept.failures += 1
            kept.due = self.clock() + min(RETRY_MAX_S, RETRY_MIN_S * 2 ** (kept.failures - 1))
            kept.busy = False
        fields = {"task": retry.task_id, "object": f"{retry.kind}/{retry.name}", "error": error}
        log.warning("delete failed; trying again", extra={"fields": {**fields, "failures": kept.failures}})

    def retry_due(self) -> None:
        """Try the failed deletes whose backoff is over again, in the background."""
        now = self.clock()
        with self.lock:
            due = [retry for retry in self.retries.values() if not retry.busy and retry.due <= now]
            for retry in due:
                retry.busy = True
        for retry in due:
            self.submit(self.try_again, retry)

    def try_again(self, retry: Retry) -> None:
        if retry.kind == "sweep":
            self.sweep(retry.namespace, retry.task_id, retry)
        else:
            self.delete(retry)

    def forget_retries(self, task_id: int) -> None:
        """A new run of ``task_id`` starts here: what an earlier one left is known by uid only."""
        with self.lock:
            for key, retry in list(self.retries.items()):
                if retry.task_id == task_id and not retry.uid:
                    del self.retries[key]

    def sweep(self, namespace: str, task_id: int, retry: Retry | None = None) -> None:
        """Delete the task's pods and Service that carry this worker's tag, each by its uid (never
        by name alone: another worker's object of that name stays); when they cannot be listed,
        try again from ``poll``."""
        retry = retry or Retry("sweep", namespace, str(task_id), task_id, failures=0)
        selector = f"{WORKER}={self.tag},{TASK}={task_id}"
        try:
            found = [
                (kind, item["metadata"])
                for kind, listing in (
                    ("pod", self.api.list_namespaced_pod),
                    ("service", self.api.list_namespaced_service),
                )
                for item in json.loads(
                    listing(
                        namespace,
                        label_selector=selector,
                        _preload_content=False,
                        _request_timeout=API_TIMEOUT_S,
                    ).data
                )["items"]
            ]
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            self.failed(retry, f"listing what to delete: {error}")
            return
        with self.lock:
            self.retries.pop(retry.key, None)
        for kind, metadata in found:
            self.delete(
                Retry(kind, namespace, metadata["name"], task_id, KILL_GRACE_S, metadata.get("uid") or "")
            )
        if found:
            fields = {"task": task_id, "deleted": ",".join(metadata["name"] for _, metadata in found)}
            log.info("deleted what a failed start left", extra={"fields": fields})

    def log_tail(self, task_id: int) -> str:
        """The last lines of pod 0's log: read now, else the last read (a deleted pod has none)."""
        work = self.works.get(task_id)
        if work is not None:
            tail = self.read_tail(work.namespace, pod_name(task_id, 0))
            if tail is not None:
                self.keep_tail(task_id, tail)
        return self.tails.get(task_id, "")

    def read_tail(self, namespace: str, name: str) -> str | None:
        try:
            return self.fetch_tail(namespace, name)
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return None

    def fetch_tail(self, namespace: str, name: str) -> str:
        # Raw: client 36 turns a "str" answer into the repr of its bytes.
        answer = self.api.read_namespaced_pod_log(
            name,
            namespace,
            container=CONTAINER,
            tail_lines=TAIL_LINES,
            _preload_content=False,
            _request_timeout=API_TIMEOUT_S,
        )
        return answer.data.decode(errors="replace")

    def keep_tail(self, task_id: int, tail: str) -> None:
        if not tail and self.tails.get(task_id):
            return  # a read before the output came, or after it was gone
        self.tails[task_id] = tail
        self.tails.move_to_end(task_id)
        while len(self.tails) > KEPT_TAILS:
            self.tails.popitem(last=False)

    # After a daemon restart.

    def recover(self) -> dict[int, str]:
        """The pods an earlier daemon with this tag left (every namespace when the service account
        may list them, else the default namespace): task id -> the pool label of its pods."""
        selector = f"{WORKER}={self.tag}"
        try:
            listed = self.api.list_pod_for_all_namespaces(
                label_selector=selector, _preload_content=False, _request_timeout=API_TIMEOUT_S
            )
        except ApiException as error:
            if error.status != 403:
                raise
            listed = self.api.list_namespaced_pod(
                self.namespace,
                label_selector=selector,
                _preload_content=False,
                _request_timeout=API_TIMEOUT_S,
            )
        self.recovered = {}
        for pod in json.loads(listed.data)["items"]:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(TASK, "").isdigit():
                self.recovered.setdefault(int(labels[TASK]), []).append(pod)
        return {
            task_id: (pods[0]["metadata"].get("labels") or {}).get(POOL, "")
            for task_id, pods in sorted(self.recovered.items())
        }

    def adopt(self, tasks: list[dict], drop: list[int]) -> None:
        """Follow the pods of ``tasks`` again; delete those of ``drop`` (and nothing else: what
        ``recover`` found of another pool under the same tag is that pool's)."""
        dropped = {int(task_id) for task_id in drop}
        for task in tasks:
            task_id = int(task["id"])
            if task_id in dropped:
                continue
            runtime = task.get("runtime") or {}
            namespace = runtime.get("namespace") or self.namespace
            pods = self.recovered.get(task_id) or self.task_pods(namespace, task_id)
            if pods:
                namespace = pods[0]["metadata"]["namespace"]
            try:
                nodes = node_count(task)
            except StartFailed:
                nodes = max(1, len(pods))
            work = Work(
                task_id,
                namespace,
                {pod_name(task_id, i): PodSeen() for i in range(nodes)},
                self.clock(),
                grace=grace_seconds(runtime),
            )
            work.service = nodes > 1
            for pod in pods:
                if pod["metadata"]["name"] in work.pods:
                    work.pods[pod["metadata"]["name"]] = summarise(pod)
            for seen in work.pods.values():
                seen.deleted = seen.deleted or not seen.uid
            self.works[task_id] = work
            self.follow(namespace)
        for task_id in sorted(dropped & set(self.recovered)):
            pods = self.recovered[task_id]
            namespace = pods[0]["metadata"]["namespace"]
            names = [pod["metadata"]["name"] for pod in pods]
            ids = {pod["metadata"]["name"]: pod["metadata"].get("uid") or "" for pod in pods}
            self.remove(namespace, task_id, names, False, grace=KILL_GRACE_S, uids=ids)
            self.sweep(namespace, task_id)  # its Service, and any pod not seen
            log.info(
                "deleted pods of a task not ours",
                extra={"fields": {"task": task_id, "pods": ",".join(names)}},
            )
        self.recovered = {}

    def task_pods(self, namespace: str, task_id: int) -> list[dict]:
        """The pods of a task in ``namespace`` (for one ``recover`` could not see: a namespace of
        its group, without the right to list pods in every namespace)."""
        try:
            answer = self.api.list_namespaced_pod(
                namespace,
                label_selector=f"{WORKER}={self.tag},{TASK}={task_id}",
                _preload_content=False,
                _request_timeout=API_TIMEOUT_S,
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return []
        return json.loads(answer.data)["items"]

    # The watches.

    def follow(self, namespace: str) -> None:
        """Watch ``namespace`` (once)."""
        if namespace in self.watchers:
            return
        thread = threading.Thread(
            target=self.watch, args=(namespace,), name=f"klique-watch-{namespace}", daemon=True
        )
        self.watchers[namespace] = Watcher(namespace, thread)
        thread.start()

    def watch(self, namespace: str) -> None:
        """List, then watch from the list's resourceVersion; after a drop resume from the last
        version seen; on 410 Gone list again. Each pod event goes to the queue ``poll`` drains,
        with pod 0's log tail read as soon as its container ended."""
        watcher = self.watchers[namespace]
        selector = f"{WORKER}={self.tag}"
        version, failures, tailed = None, 0, set()
        while not watcher.stop.is_set():
            try:
                if version is None:
                    listed_at = self.clock()
                    answer = self.api.list_namespaced_pod(
                        namespace,
                        label_selector=selector,
                        _preload_content=False,
                        _request_timeout=API_TIMEOUT_S,
                    )
                    listing = json.loads(answer.data)
                    for pod in listing["items"]:
                        self.queue_pod(namespace, "MODIFIED", pod, tailed)
                    names = {pod["metadata"]["name"] for pod in listing["items"]}
                    self.events.put(("listed", namespace, names, None, listed_at))
                    version = listing["metadata"]["resourceVersion"]
                    watcher.healthy = True
                watcher.stream = watch.Watch()
                for event in watcher.stream.stream(
                    self.api.list_namespaced_pod,
                    namespace,
                    label_selector=selector,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=int(self.watch_timeout_s),
                    _request_timeout=(API_TIMEOUT_S, self.watch_timeout_s + API_TIMEOUT_S),
                ):
                    pod = event["raw_object"]
                    version = pod["metadata"].get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.queue_pod(namespace, event["type"], pod, tailed)
                    # Healthy only once the event is queued: poll would otherwise judge a pending
                    # timeout on what the runner knew before the outage.
                    watcher.healthy = True
                    if watcher.stop.is_set():
                        return
                failures = 0
            except ApiException as error:
                if watcher.stop.is_set():
                    return
                if error.status == 410:
                    log.info("watch expired; listing again", extra={"fields": {"namespace": namespace}})
                    version = None
                    continue
                failures += 1
                watcher.healthy = False
                log.warning(
                    "watch failed", extra={"fields": {"namespace": namespace, "error": api_message(error)}}
                )
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
                if watcher.stop.is_set():
                    return
                failures += 1
                watcher.healthy = False
                log.warning("watch dropped", extra={"fields": {"namespace": namespace, "error": str(error)}})
            if failures:
                watcher.stop.wait(min(10.0, 0.1 * 2 ** min(failures, 7)))

    def confirm_gone(self, namespace: str, task_id: int, name: str, uid: str) -> None:
        """Tell ``poll`` that the pod ``name`` of ``uid`` is gone, if a list of the task's pods lacks
        it (a list, not a read by name: the Role grants no get on pods)."""
        selector = f"{WORKER}={self.tag},{TASK}={task_id}"
        try:
            answer = self.api.list_namespaced_pod(
                namespace, label_selector=selector, _request_timeout=API_TIMEOUT_S
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return
        if not any(pod.metadata.uid == uid for pod in answer.items):
            self.events.put(("gone", namespace, (name, uid), None))

    def queue_pod(self, namespace: str, event_type: str, pod: dict, tailed: set) -> None:
        labels = pod["metadata"].get("labels") or {}
        seen = summarise(pod)
        tail = None
        key = (pod["metadata"].get("uid"), seen.exit_code)
        ended = seen.exit_code is not None or seen.deleting
        if labels.get(NODE_INDEX, "0") == "0" and ended and event_type != "DELETED" and key not in tailed:
            tail = self.read_tail(namespace, pod["metadata"]["name"])
            if tail is not None:
                if len(tailed) > 10_000:
                    tailed.clear()
                tailed.add(key)
        self.events.put((event_type, namespace, pod, tail))

    def observed_gpus(self) -> int | None:
        """The GPUs this pool's nodes really have (``kube_nodes.allocatable_gpus``)."""
        return kube_nodes.allocatable_gpus(self.api, self.node_selector, API_TIMEOUT_S)

    def close(self) -> None:
        """Stop watching (the pods keep running)."""
        for watcher in self.watchers.values():
            watcher.stop.set()
            if watcher.stream is not None:
                watcher.stream.stop()
        self.background.shutdown(wait=False)


def api_client(kubeconfig: str = "", context: str = "") -> client.ApiClient:
    """A client from the kubeconfig (and context), or the in-cluster service account."""
    if kubeconfig or context or not _in_cluster():
        return config.new_client_from_config(config_file=kubeconfig or None, context=context or None)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def _in_cluster() -> bool:
    return Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()


def api_message(error: ApiException) -> str:
    try:
        return json.loads(error.body).get("message") or str(error.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{error.status} {error.reason}"
