"""Load the engine core's snapshot from the database in a fixed number of queries.

Ids in the snapshot are the database primary keys as strings. Queues come out of the database
already in seq order and placed work in placement order, as the core expects.
"""

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings

from apps.core.gpus import to_milli
from apps.engine import core
from apps.ledger.budgets import budget_units_used
from apps.policies.models import ComputeResource, Profile, ProfilePool, ResourcePolicy
from apps.policies.selectors import parent_policy_ids
from apps.pools.models import Pool
from apps.tasks.models import Task


@dataclass(frozen=True)
class Loaded:
    """The snapshot, and what the applier needs to write decisions back."""

    snapshot: core.Snapshot
    verdicts: dict[str, dict]
    pool_names: dict[str, str]
    group_names: dict[str, str]


def milli_weight(weight) -> int:
    return int(weight * 1000)


def load(now) -> Loaded:
    pools = list(Pool.objects.order_by("pk").values("pk", "name", "capacity", "enabled"))
    links = list(ProfilePool.objects.values("profile_id", "pool_id", "pool_rank", "profile_rank"))
    profiles = list(Profile.objects.order_by("pk").values("pk", "gpus", "size_from_task", "time_weight"))
    resources = list(
        ComputeResource.objects.order_by("pk").values("pk", "policy_id", "profile_id", "queuing_rank")
    )
    policies = list(ResourcePolicy.objects.order_by("pk").select_related("group"))
    parents = parent_policy_ids()
    used = budget_units_used(policies, now, parents)

    execution = defaultdict(list)
    pool_order = defaultdict(list)
    for link in links:
        execution[link["pool_id"]].append((link["profile_rank"], link["profile_id"]))
        pool_order[link["profile_id"]].append((link["pool_rank"], link["pool_id"]))
    queuing = defaultdict(list)
    for resource in resources:
        queuing[resource["profile_id"]].append(
            (resource["queuing_rank"], resource["pk"], resource["policy_id"])
        )

    waiting, verdicts = _waiting()

    def ids(pairs) -> tuple[str, ...]:
        return tuple(str(pk) for *_, pk in sorted(pairs))

    snapshot = core.Snapshot(
        now=now,
        low_watermark_s=settings.LOW_WATERMARK_S,
        pools=tuple(
            core.Pool(
                id=str(p["pk"]),
                capacity=to_milli(p["capacity"]),
                profiles=ids(execution[p["pk"]]),
                enabled=p["enabled"],
            )
            for p in pools
        ),
        profiles=tuple(
            core.Profile(
                id=str(f["pk"]),
                size=to_milli(f["gpus"]),
                pools=ids(pool_order[f["pk"]]),
                policies=tuple(str(policy) for _, _, policy in sorted(queuing[f["pk"]])),
                time_weight=milli_weight(f["time_weight"]),
                size_from_task=f["size_from_task"],
            )
            for f in profiles
        ),
        policies=tuple(
            core.Policy(
                id=str(p.pk),
                reservation=to_milli(p.reservation),
                limit=to_milli(p.limit),
                parent=str(parents[p.pk]) if parents.get(p.pk) else None,
                budget=core.Budget(
                    limit=core.hours_to_units(p.budget_hours), period=p.budget_period, used=used.get(p.pk, 0)
                )
                if p.has_budget
                else None,
            )
            for p in policies
        ),
        resources=tuple(
            core.ComputeResource(id=str(r["pk"]), policy=str(r["policy_id"]), profile=str(r["profile_id"]))
            for r in resources
        ),
        waiting=waiting,
        placed=tuple(
            core.PlacedTask(
                id=str(pk),
                resource=str(resource),
                pool=str(pool),
                size=to_milli(gpus),
                seq=seq,
                placed_at=placed_at,
                preempting=state == Task.State.STOPPING,
            )
            for pk, resource, pool, gpus, seq, placed_at, state in Task.objects.filter(
                state__in=Task.ACTIVE_STATES
            )
            .order_by("placed_at", "queue_seq")
            .values_list("pk", "compute_resource_id", "pool_id", "gpus", "queue_seq", "placed_at", "state")
        ),
    )
    return Loaded(
        snapshot=snapshot,
        verdicts=verdicts,
        pool_names={str(p["pk"]): p["name"] for p in pools},
        group_names={str(p.pk): p.group.name for p in policies},
    )


def _waiting() -> tuple[dict[str, tuple[core.WaitingTask, ...]], dict[str, dict]]:
    """The queues in seq order, and the verdict each waiting task shows now."""
    queues: dict[str, list[core.WaitingTask]] = defaultdict(list)
    verdicts: dict[str, dict] = {}
    rows = (
        Task.objects.filter(state=Task.State.QUEUED)
        .order_by("compute_resource_id", "queue_seq")
        .values_list("pk", "compute_resource_id", "queue_seq", "gpus", "submitted_at", "verdict")
    )
    for pk, resource, seq, gpus, submitted_at, verdict in rows:
        task_id = str(pk)
        queues[str(resource)].append(
            core.WaitingTask(id=task_id, seq=seq, size=to_milli(gpus), submitted_at=submitted_at)
        )
        verdicts[task_id] = verdict
    return {resource: tuple(queue) for resource, queue in queues.items()}, verdicts
