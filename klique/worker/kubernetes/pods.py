"""What the runner creates and reads: a task's pods (one per node, ``restartPolicy: Never``) and the
headless Service of a multi-node task, built from the task and the worker's flags, and a pod as
the API serves it summed up in the terms the runner acts on (``summarise``).

A task with a time limit gets ``activeDeadlineSeconds``: its limit plus the pending timeout. The
kubelet counts it from the pod's start, image pull included, which the pending timeout bounds;
the daemon stops the work at its limit of running time, and the deadline stops it should the
daemon be gone. A pod failed at its deadline (``DeadlineExceeded``) is an end that timed out."""

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from klique.worker.runs import StartFailed, task_variables, time_limit_s

MANAGED_BY = "app.kubernetes.io/managed-by"
WORKER, TASK, NODE_INDEX = "klique.io/worker", "klique.io/task", "klique.io/node-index"
POOL = "klique.io/pool"
CONTAINER = "task"
CHECKPOINT_MOUNT = "/klique/checkpoints"
# Waiting reasons of a scheduled pod that will not go away by waiting: the task's image or config.
HOPELESS_WAITING = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
}
TERMINAL = {"Succeeded", "Failed"}
MAX_DEADLINE_S = 2**31 - 1  # the most activeDeadlineSeconds the API server takes


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
    deadline: bool = False  # failed at its activeDeadlineSeconds

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
    if status.get("reason") == "DeadlineExceeded" and seen.phase == "Failed":
        # Its time limit, not the pool taking it back: an end (143 where no exit was recorded).
        seen.deadline, seen.disrupted = True, False
        seen.exit_code = 143 if seen.exit_code is None else seen.exit_code
        seen.reason = "DeadlineExceeded"
        seen.message = status.get("message") or seen.message
    elif status.get("reason") == "Evicted" or (seen.phase == "Failed" and seen.exit_code is None):
        seen.disrupted = True
        seen.reason = status.get("reason") or seen.reason
        seen.message = status.get("message") or seen.message
    return seen


class PodSpecs:
    """The pods and Service of a task, from the runner's flags (``tag``, ``image``,
    ``checkpoint_pvc``, ``service_account``, ``scheduler_name``, ``node_selector``,
    ``pending_timeout_s``): a part of ``KubernetesRunner``."""

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
            variables.pop("KLIQUE_CHECKPOINT_MARK", None)
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
        limit = time_limit_s(task)
        if limit is not None:
            deadline = limit + math.ceil(self.pending_timeout_s)
            pod_spec["activeDeadlineSeconds"] = min(deadline, MAX_DEADLINE_S)
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
