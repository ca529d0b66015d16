"""What container a task becomes: its name and labels, image, command, environment, checkpoint
folder, GPUs (a device request through the NVIDIA runtime) and memory and CPU limits."""

import math
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

from docker.types import DeviceRequest, Mount

from klique.worker.quantities import FACTORS, QUANTITY
from klique.worker.runs import StartFailed, task_variables

WORKER, TASK, POOL = "klique.io/worker", "klique.io/task", "klique.io/pool"
CHECKPOINT_MOUNT = "/klique/checkpoint"
# Docker and Podman refuse containers with less memory than this.
MIN_MEMORY = 6 * 1024 * 1024


def label_value(text: str) -> str:
    """``text`` as a label value: [A-Za-z0-9._-], at most 63 characters, alphanumeric at both ends."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", str(text))[:63].strip("-._")


def quantity(text, field_name: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2``, ``4Gi``) as a number, or a recurring StartFailed."""
    found = QUANTITY.fullmatch(str(text))
    if not found:
        raise StartFailed(f"{field_name}: {text!r} is not a quantity such as 500m, 2 or 4Gi", recurs=True)
    try:
        return Decimal(found[1]) * FACTORS[found[2]]
    except InvalidOperation as error:
        raise StartFailed(f"{field_name}: {text!r} is not a quantity", recurs=True) from error


class ContainerSpecs:
    """The containers of ``DockerRunner`` (its ``tag``, ``init``, ``network`` and ``nvidia``): a
    part of it."""

    def name(self, task_id: int) -> str:
        return f"klique-{task_id}-{self.tag}"

    def config(self, task: dict, devices: list[str], image: str, checkpoints: Path) -> dict:
        """The container to create for ``task`` (keyword arguments of ``containers.create``)."""
        labels = {f"klique.io/{key}": label_value(value) for key, value in (task.get("labels") or {}).items()}
        labels.update({WORKER: self.tag, TASK: str(task["id"])})
        environment = task_variables(task, Path(CHECKPOINT_MOUNT))
        environment.update(
            NVIDIA_VISIBLE_DEVICES=",".join(devices) or "void",
            CUDA_VISIBLE_DEVICES=",".join(str(index) for index in range(len(devices))),
            CUDA_DEVICE_ORDER="PCI_BUS_ID",
        )
        config = dict(
            image=image,
            entrypoint=["/bin/sh", "-c"],
            command=[task["command"]],
            name=self.name(task["id"]),
            labels=labels,
            environment=environment,
            mounts=[Mount(target=CHECKPOINT_MOUNT, source=str(checkpoints), type="bind")],
            init=self.init,
        )
        if self.network:
            config["network"] = self.network
        if devices and self.nvidia:
            config["device_requests"] = [
                DeviceRequest(driver="nvidia", device_ids=list(devices), capabilities=[["gpu"]])
            ]
        config.update(self.limits(task))
        return config

    def limits(self, task: dict) -> dict:
        """``mem_limit`` and ``nano_cpus`` from the spec's resources and, for a fraction of a GPU,
        the profile's memory cap (the smaller memory wins)."""
        spec = task.get("spec") or {}
        resources = (spec.get("resources") or {}) if isinstance(spec, dict) else {}
        if not isinstance(resources, dict):
            raise StartFailed("spec.resources is not an object", recurs=True)
        memories = []
        if resources.get("memory") is not None:
            memories.append(math.ceil(quantity(resources["memory"], "spec.resources.memory")))
        cap = (task.get("runtime") or {}).get("memory_limit_mb")
        if cap and 0 < Decimal(str(task["gpus"])) < 1:
            memories.append(int(cap) * 1024 * 1024)
        limits = {}
        if memories:
            limits["mem_limit"] = max(min(memories), MIN_MEMORY)
        if resources.get("cpu") is not None:
            limits["nano_cpus"] = max(1, int(quantity(resources["cpu"], "spec.resources.cpu") * 10**9))
        return limits
