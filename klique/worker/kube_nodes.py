"""The GPUs a Kubernetes pool really has: the allocatable ``nvidia.com/gpu`` of the Ready,
schedulable nodes the daemon's pods may go to (``--kube-node-selector``, also the pods'
``nodeSelector``). The daemon reports it so the engine never places more than is there
(docs/workers-kubernetes.md, "Capacity"). Listing nodes needs the ClusterRole of
deploy/kubernetes/node-reader.yaml; without it the daemon serves its ``--gpus`` as declared."""

import logging
from decimal import Decimal, InvalidOperation

import urllib3
from kubernetes.client.rest import ApiException

log = logging.getLogger("klique.worker")

GPU_RESOURCE = "nvidia.com/gpu"


def node_selector(text: str) -> dict[str, str]:
    """``key=value,key2=value2`` as a nodeSelector; ValueError for anything else."""
    selector = {}
    for part in filter(None, (item.strip() for item in (text or "").split(","))):
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"--kube-node-selector: {part!r} is not key=value")
        selector[key.strip()] = value.strip()
    return selector


def ready(node) -> bool:
    if node.spec is not None and node.spec.unschedulable:
        return False
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def allocatable_gpus(api, selector: dict[str, str], timeout: float) -> int | None:
    """Whole GPUs allocatable on the Ready, schedulable nodes matching ``selector``; None when the
    API server cannot be asked or refuses (forbidden: no node-reader ClusterRole)."""
    labels = ",".join(f"{key}={value}" for key, value in selector.items())
    try:
        nodes = api.list_node(label_selector=labels, _request_timeout=timeout).items
    except ApiException as error:
        log.warning(
            "cannot list nodes: serving the declared --gpus", extra={"fields": {"status": error.status}}
        )
        return None
    except (urllib3.exceptions.HTTPError, OSError) as error:
        log.warning("cannot list nodes: serving the declared --gpus", extra={"fields": {"error": str(error)}})
        return None
    total = 0
    for node in nodes:
        if not ready(node):
            continue
        try:
            total += int(Decimal(str((node.status.allocatable or {}).get(GPU_RESOURCE, "0"))))
        except (InvalidOperation, ValueError):
            continue
    return total
