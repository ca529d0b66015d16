"""Writes for profiles, resource policies, compute resources and the three orderings.

Every write runs the rules of ``apps.policies.rules`` (through ``full_clean``) inside a transaction,
so a change that breaks one is refused whole, with the field and the reason.
"""

from collections.abc import Sequence

from django.db import transaction
from django.db.models import Max

from apps.accounts.models import Group
from apps.core.writes import validated_save
from apps.policies.models import ComputeResource, Profile, ProfilePool, ResourcePolicy
from apps.pools.models import Pool


def create_profile(
    *,
    name: str,
    gpus,
    time_weight=1,
    size_from_task: bool = False,
    pools: Sequence[Pool] = (),
    description: str = "",
) -> Profile:
    with transaction.atomic():
        profile = validated_save(
            Profile(
                name=name,
                gpus=gpus,
                time_weight=time_weight,
                size_from_task=size_from_task,
                description=description,
            )
        )
        for pool in pools:
            link_pool(profile, pool)
        return profile


def update_profile(profile: Profile, **fields) -> Profile:
    with transaction.atomic():
        return validated_save(profile, **fields)


def link_pool(profile: Profile, pool: Pool) -> ProfilePool:
    """Add a pool at the end of the profile's pool order and of the pool's execution order."""
    with transaction.atomic():
        existing = ProfilePool.objects.filter(profile=profile, pool=pool).first()
        if existing:
            return existing
        last_pool = ProfilePool.objects.filter(profile=profile).aggregate(m=Max("pool_rank"))["m"]
        last_profile = ProfilePool.objects.filter(pool=pool).aggregate(m=Max("profile_rank"))["m"]
        return ProfilePool.objects.create(
            profile=profile,
            pool=pool,
            pool_rank=0 if last_pool is None else last_pool + 1,
            profile_rank=0 if last_profile is None else last_profile + 1,
        )


def _renumber(rows, field: str) -> None:
    for rank, row in enumerate(rows):
        if getattr(row, field) != rank:
            setattr(row, field, rank)
            row.save(update_fields=[field])


def _in_given_order(rows_by_key: dict, keys: Sequence, what: str) -> list:
    unknown = [k for k in keys if k not in rows_by_key]
    if unknown or len(set(keys)) != len(keys):
        raise ValueError(f"{what} must list each linked item once; unknown or repeated: {unknown or keys}")
    missing = [row for key, row in rows_by_key.items() if key not in keys]
    return [rows_by_key[k] for k in keys] + missing


@transaction.atomic
def set_pool_order(profile: Profile, pools: Sequence[Pool]) -> None:
    """The profile's pool order: work goes to the first pool with capacity, then the next."""
    links = {link.pool_id: link for link in ProfilePool.objects.select_for_update().filter(profile=profile)}
    _renumber(_in_given_order(links, [p.pk for p in pools], "pool order"), "pool_rank")


@transaction.atomic
def set_execution_order(pool: Pool, profiles: Sequence[Profile]) -> None:
    """Execution priority on a pool: which profile's work the pool places first."""
    links = {link.profile_id: link for link in ProfilePool.objects.select_for_update().filter(pool=pool)}
    _renumber(_in_given_order(links, [p.pk for p in profiles], "execution order"), "profile_rank")


@transaction.atomic
def set_queuing_order(profile: Profile, policies: Sequence[ResourcePolicy]) -> None:
    """Queuing priority on a profile: which group's work is placed first when several wait."""
    resources = {r.policy_id: r for r in ComputeResource.objects.select_for_update().filter(profile=profile)}
    _renumber(_in_given_order(resources, [p.pk for p in policies], "queuing order"), "queuing_rank")


def create_policy(
    *, group: Group, reservation, limit, budget_hours=None, budget_period: str = "", alert_threshold: int = 80
) -> ResourcePolicy:
    with transaction.atomic():
        return validated_save(
            ResourcePolicy(
                group=group,
                reservation=reservation,
                limit=limit,
                budget_hours=budget_hours,
                budget_period=budget_period,
                alert_threshold=alert_threshold,
            )
        )


def update_policy(policy: ResourcePolicy, **fields) -> ResourcePolicy:
    with transaction.atomic():
        ResourcePolicy.objects.select_for_update().filter(pk=policy.pk).first()
        return validated_save(policy, **fields)


def connect(*, policy: ResourcePolicy, profile: Profile, name: str = "") -> ComputeResource:
    """Create the compute resource joining a policy to a profile, last in the profile's queuing order.

    Refused when the profile is larger than the policy's limit.
    """
    with transaction.atomic():
        last = ComputeResource.objects.filter(profile=profile).aggregate(m=Max("queuing_rank"))["m"]
        return validated_save(
            ComputeResource(
                name=name or f"{policy.group.slug}/{profile.name}",
                policy=policy,
                profile=profile,
                queuing_rank=0 if last is None else last + 1,
            )
        )
