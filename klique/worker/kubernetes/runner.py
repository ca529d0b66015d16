"""``KubernetesRunner``, the runner the daemon calls in Kubernetes mode: its flags, ``start`` (the
task's pods and Service created), ``poll`` (what the watched pods now say, as the daemon's
changes), ``terminate`` and ``kill``. What it creates is built in pods.py, followed in watch.py,
deleted in deletes.py and found again after a restart in adoption.py; the mode as a whole is
described in the package's docstring."""

import logging
import math
import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from klique.worker import kube_nodes
from klique.worker.kubernetes.adoption import Adopting
from klique.worker.kubernetes.api import API_TIMEOUT_S, api_client, api_message, timed_out
from klique.worker.kubernetes.deletes import KILL_GRACE_S, Deleting, Retry, grace_seconds
from klique.worker.kubernetes.pods import (
    CHECKPOINT_MOUNT,
    PodSeen,
    PodSpecs,
    Work,
    label_value,
    node_count,
    pod_name,
    uids,
)
from klique.worker.kubernetes.watch import Watcher, Watching
from klique.worker.runs import Change, StartFailed, env

log = logging.getLogger("klique.worker")


class KubernetesRunner(PodSpecs, Watching, Deleting, Adopting):
    mode = "kubernetes"
    claims_total = True  # the Kubernetes scheduler picks the GPUs
    multi_node = True  # one pod per node and a headless Service
    whole_gpus = False  # a fraction is an extended resource IT maps (MIG slice, shared GPU)
    limits_time = False  # the daemon stops work at its time limit (klique/worker/work.py)

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

    def changes(self, work: Work, now: float, current: bool) -> list[Change]:
        """What the task's pods now say; ``current``: its namespace's watch was healthy before this
        poll drained the events (only then is a pending timeout judged)."""
        pods = list(work.pods.values())
        detail = {
            "namespace": work.namespace,
            "pods": ",".join(work.pods),
            "node": pods[0].node if pods else "",
        }
        timed_out = any(seen.deadline for seen in pods)
        if work.stopping:
            if all(seen.deleted for seen in pods):
                codes = [seen.exit_code for seen in pods if seen.exit_code is not None]
                code = next((c for c in codes if c), 0) if codes else (137 if work.killed else 143)
                change = Change(work.task_id, "exited", code, detail, timed_out=timed_out)
                return self.end(work, change, remove=False)
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
            change = Change(work.task_id, "exited", code, detail, timed_out=timed_out)
            return started + self.end(work, change)
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
