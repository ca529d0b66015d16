"""What a worker daemon needs to run a claimed task beyond its command: the labels it puts on the
work (Kubernetes pods, Docker containers) and the runtime (image, namespace, GPU resource, memory
cap, stop grace). One place builds them, for the claim answer, the enrol answer's adopted tasks
and the stop commands' grace (docs/model.md, "Running on Kubernetes and Docker")."""

import re
from decimal import Decimal

from django.conf import settings

from apps.policies.models import ProfilePool

WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
LABEL_MAX = 63
NOT_IN_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
NOT_IN_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value: [A-Za-z0-9._-], at most 63 characters, beginning and
    ending with a letter or digit (or empty)."""
    value = NOT_IN_LABEL.sub("-", str(text))[:LABEL_MAX]
    return value.strip("._-")


def dns_label(text: str) -> str:
    """``text`` as a DNS-1123 label (a Kubernetes namespace): lowercase letters, digits and '-',
    at most 63, beginning and ending with a letter or digit."""
    return NOT_IN_DNS_LABEL.sub("-", text.lower())[:LABEL_MAX].strip("-")


def task_labels(task) -> dict[str, str]:
    """Needs ``user``, ``project`` and ``compute_resource__policy__group`` loaded. ``pool`` (the
    pool's id) tells a restarted daemon its own pool's work from another pool's whose daemon shares
    its hostname."""
    return {
        "task": str(task.pk),
        "pool": str(task.pool_id) if task.pool_id else "",
        "group": label_value(task.compute_resource.policy.group.slug),
        "project": label_value(task.project.name) if task.project_id else "",
        "user": label_value(task.user.get_username()),
    }


def stop_grace_s(profile) -> float:
    """Seconds between SIGTERM and SIGKILL for the profile's tasks: its own, else the server's."""
    grace = profile.stop_grace_s
    return float(settings.WORKER_STOP_GRACE_S if grace is None else grace)


def namespace(pool, group_slug: str) -> str:
    if not pool.namespace:
        return ""
    if pool.namespace_per_group:
        return dns_label(f"{pool.namespace}-{group_slug}")
    return pool.namespace


def gpu_resource(gpus: Decimal, link) -> tuple[str, int]:
    """The Kubernetes resource and count per node for a task of ``gpus`` GPUs per node: whole GPUs
    are ``nvidia.com/gpu``; a fraction is the extended resource IT mapped for the profile on the
    pool (``ProfilePool.gpu_resource``), or nothing when it mapped none."""
    if gpus <= 0:
        return "", 0
    if gpus >= 1:
        return WHOLE_GPU_RESOURCE, int(gpus)
    if link is not None and link.gpu_resource:
        return link.gpu_resource, link.gpu_resource_count
    return "", 0


def task_runtime(task, link) -> dict:
    """The runtime of a task placed on a pool; ``link`` is the profile's ProfilePool for that pool
    (or None). Needs ``pool`` and ``compute_resource__profile``/``__policy__group`` loaded."""
    profile = task.compute_resource.profile
    spec = task.spec if isinstance(task.spec, dict) else {}
    resource, count = gpu_resource(task.gpus, link)
    return {
        "image": spec.get("image") or profile.image or "",
        "namespace": namespace(task.pool, task.compute_resource.policy.group.slug) if task.pool_id else "",
        "gpu_resource": resource,
        "gpu_count": count,
        "memory_limit_mb": profile.memory_limit_mb,
        "grace_s": stop_grace_s(profile),
    }


RELATED = ("user", "project", "pool", "compute_resource__profile", "compute_resource__policy__group")


def run_details(tasks) -> dict[int, tuple[dict, dict]]:
    """(labels, runtime) of each task by id, with one query for the profiles' pool links. The tasks
    need ``RELATED`` loaded."""
    pairs = {(t.compute_resource.profile_id, t.pool_id) for t in tasks if t.pool_id}
    links = {}
    if pairs:
        rows = ProfilePool.objects.filter(
            profile_id__in={p for p, _ in pairs}, pool_id__in={q for _, q in pairs}
        )
        links = {(link.profile_id, link.pool_id): link for link in rows}
    return {
        t.pk: (task_labels(t), task_runtime(t, links.get((t.compute_resource.profile_id, t.pool_id))))
        for t in tasks
    }
