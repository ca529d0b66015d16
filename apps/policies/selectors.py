"""Reads of the policy tree. A policy's parent is the policy of its group's nearest ancestor
that has one; group trees are small, so the group table is read whole."""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import DecimalField, F, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Greatest

from apps.accounts.models import Group, User
from apps.accounts.selectors import managed_group_ids, member_group_ids
from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS
from apps.policies.fit import pool_fit
from apps.policies.models import (
    BudgetWindow,
    ComputeResource,
    PriorityClass,
    ProfilePool,
    QuotaLoan,
    ResourcePolicy,
)
from apps.pools.models import Pool

GPUS = DecimalField(max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES)


def _nearest_holder(group_id: int, parents: dict[int, int | None], holders: set[int]) -> int | None:
    """The nearest strict ancestor of ``group_id`` that is in ``holders``."""
    node, seen = parents.get(group_id), {group_id}
    while node is not None and node not in seen:
        if node in holders:
            return node
        seen.add(node)
        node = parents.get(node)
    return None


def parent_policy_ids() -> dict[int, int | None]:
    """policy id -> parent policy id (None at the top), for the whole tree in two queries."""
    parents = dict(Group.objects.values_list("pk", "parent_id"))
    policy_of_group = dict(ResourcePolicy.objects.values_list("group_id", "pk"))
    holders = set(policy_of_group)
    result: dict[int, int | None] = {}
    for group_id, policy_id in policy_of_group.items():
        holder = _nearest_holder(group_id, parents, holders)
        result[policy_id] = policy_of_group[holder] if holder is not None else None
    return result


def ancestry(pk: int, parents: dict[int, int | None]):
    """The policy, then its parent, grandparent and so on to the top (a cycle is walked once)."""
    node, seen = pk, set()
    while node is not None and node not in seen:
        yield node
        seen.add(node)
        node = parents.get(node)


def subtrees_of(roots: set[int], parents: dict[int, int | None]) -> set[int]:
    """The policies in the subtrees of ``roots`` (the roots too): whose use counts toward them."""
    return {pk for pk in parents.keys() | roots if any(node in roots for node in ancestry(pk, parents))}


def subtree_sums(own: dict, parents: dict[int, int | None]) -> dict:
    """Each policy's figure summed with every descendant's (``own``: policy id -> its own figure)."""
    total: dict = defaultdict(int)
    for pk, amount in own.items():
        for node in ancestry(pk, parents):
            total[node] += amount
    return total


def parent_policy_ids_of(group_ids) -> set[int]:
    """The ids of the parent policies of policies of these groups (saved or not), in two queries."""
    parents = dict(Group.objects.values_list("pk", "parent_id"))
    policy_of_group = dict(ResourcePolicy.objects.values_list("group_id", "pk"))
    holders = {_nearest_holder(group_id, parents, set(policy_of_group)) for group_id in group_ids}
    return {policy_of_group[holder] for holder in holders if holder is not None}


def parent_policy(policy: ResourcePolicy) -> ResourcePolicy | None:
    parents = dict(Group.objects.values_list("pk", "parent_id"))
    by_group = {p.group_id: p for p in ResourcePolicy.objects.select_related("group")}
    holder = _nearest_holder(policy.group_id, parents, set(by_group))
    return by_group.get(holder) if holder is not None else None


def child_policies(policy: ResourcePolicy) -> list[ResourcePolicy]:
    """Policies whose nearest policy-holding ancestor group is this policy's group (saved or not)."""
    parents = dict(Group.objects.values_list("pk", "parent_id"))
    others = [p for p in ResourcePolicy.objects.select_related("group") if p.group_id != policy.group_id]
    holders = {p.group_id for p in others} | {policy.group_id}
    return [p for p in others if _nearest_holder(p.group_id, parents, holders) == policy.group_id]


def priority_class_name(value: int) -> str | None:
    """The name IT gave the priority ``value`` (a priority class), or None."""
    return PriorityClass.objects.filter(value=value).values_list("name", flat=True).first()


PERIOD_ORDER = {"day": 0, "week": 1, "month": 2}


def budget_windows(policies) -> dict[int, dict[str, Decimal]]:
    """policy id -> {period: budget hours} of each time budget window of each policy: the main one
    (``budget_hours`` per ``budget_period``) first, then its further windows, shortest period first.
    One query, none without a budgeted policy. Policies without a budget get no entry."""
    policies = [p for p in policies if p.has_budget]
    result = {p.pk: {p.budget_period: p.budget_hours} for p in policies}
    if not policies:
        return result
    extra = BudgetWindow.objects.filter(policy_id__in=list(result), hours__isnull=False).values_list(
        "policy_id", "period", "hours"
    )
    for policy_id, period, hours in sorted(extra, key=lambda row: (row[0], PERIOD_ORDER.get(row[1], 9))):
        result[policy_id].setdefault(period, hours)
    return result


def priced_policies():
    """The policies with a money budget window, with their groups."""
    return (
        ResourcePolicy.objects.filter(extra_budgets__amount__isnull=False).distinct().select_related("group")
    )


def money_windows(policies) -> dict[int, dict[str, tuple[Decimal, str]]]:
    """policy id -> {period: (amount, currency)} of each money budget window of each policy,
    shortest period first. One query. Policies without a money window get no entry."""
    ids = [p.pk for p in policies if p.pk is not None]
    if not ids:
        return {}
    rows = BudgetWindow.objects.filter(policy_id__in=ids, amount__isnull=False).values_list(
        "policy_id", "period", "amount", "currency"
    )
    result: dict[int, dict[str, tuple[Decimal, str]]] = {}
    for policy_id, period, amount, currency in sorted(
        rows, key=lambda row: (row[0], PERIOD_ORDER.get(row[1], 9))
    ):
        result.setdefault(policy_id, {})[period] = (amount, currency)
    return result


# Channels: which compute resources and policies a person may use or see.


def submittable_resources(user: User):
    """Compute resources of the groups the user belongs to: the only ones they may submit to."""
    return ComputeResource.objects.select_related("policy__group", "profile").filter(
        policy__group_id__in=member_group_ids(user)
    )


def visible_group_ids(user: User) -> set[int] | None:
    """The groups whose resources, policies and work the user may see; ``None`` means all."""
    managed = managed_group_ids(user)
    return None if managed is None else managed | member_group_ids(user)


def visible_policies(user: User):
    groups = visible_group_ids(user)
    policies = ResourcePolicy.objects.select_related("group")
    return policies if groups is None else policies.filter(group_id__in=groups)


def resource_is_visible(user: User, resource: ComputeResource) -> bool:
    groups = visible_group_ids(user)
    return groups is None or resource.policy.group_id in groups


def may_submit(user: User, resource: ComputeResource) -> bool:
    return resource.policy.group_id in member_group_ids(user)


# What a pool can grow to beyond its declared capacity, from apps above the estate (the cloud's
# autoscaler: its instance types' maximum), registered from their AppConfig.ready: each is a
# function of the pool's id (an OuterRef) giving a one-row, one-column queryset of GPUs.
POOL_CEILINGS: list = []


def largest_pool(profile_id: int) -> tuple[str, Decimal] | None:
    """The largest pool the profile lists, enabled or not, by declared capacity, as (name, GPUs);
    None when it lists none. A pool that can grow counts its ceiling (``POOL_CEILINGS``: an
    autoscaled cloud pool's maximum, even while its autoscaler is disabled). One query."""
    declared = F("pool__capacity")
    for ceiling in POOL_CEILINGS:
        declared = Greatest(
            declared,
            Coalesce(
                Subquery(ceiling(OuterRef("pool_id")), output_field=GPUS),
                Value(Decimal(0)),
                output_field=GPUS,
            ),
            output_field=GPUS,
        )
    return (
        ProfilePool.objects.filter(profile_id=profile_id)
        .annotate(declared=declared)
        .order_by("-declared", "pool__name")
        .values_list("pool__name", "declared")
        .first()
    )


def newest_first(pools: Sequence[Pool]) -> list[Pool]:
    """``pools`` newest hardware first: by GPU generation, then GPU memory, both descending; ties
    keep their order."""
    return sorted(pools, key=lambda pool: (-pool.gpu_type.generation, -pool.gpu_type.memory_gb))


def suggested_pool_order(profile) -> list[Pool]:
    """Every pool that fits the profile (its sovereignty and minimum GPU memory and generation),
    newest hardware first, then by name: the pool order IT is offered."""
    pools = Pool.objects.select_related("gpu_type").order_by("name")
    return newest_first([pool for pool in pools if not pool_fit(profile, pool)])


@dataclass(frozen=True)
class ReservationCover:
    """The reservations of the policies that can run on a pool, against its declared capacity."""

    reserved: Decimal
    capacity: Decimal
    policies: tuple[str, ...]

    @property
    def overcommitted(self) -> bool:
        return self.reserved > self.capacity


def reservations_behind(pool: Pool) -> ReservationCover:
    """Sum the reservations of the policies whose profiles list this pool.

    A parent's reservation already covers its children's, so a policy is counted only when no
    ancestor of it is also behind the pool.
    """
    behind = {
        p.pk: p
        for p in ResourcePolicy.objects.filter(compute_resources__profile__pool_links__pool=pool)
        .select_related("group")
        .distinct()
    }
    parents = parent_policy_ids()

    def has_ancestor_behind(pk: int) -> bool:
        node = parents.get(pk)
        while node is not None:
            if node in behind:
                return True
            node = parents.get(node)
        return False

    counted = [p for pk, p in behind.items() if not has_ancestor_behind(pk)]
    return ReservationCover(
        reserved=sum((p.reservation for p in counted), Decimal("0")),
        capacity=pool.capacity,
        policies=tuple(sorted(str(p.group) for p in counted)),
    )


def estate_overview() -> dict:
    pools = list(Pool.objects.select_related("gpu_type"))
    return {
        "pools": pools,
        "total_capacity": Pool.objects.filter(enabled=True).aggregate(total=Sum("capacity"))["total"] or 0,
        "policy_count": ResourcePolicy.objects.count(),
        "resource_count": ComputeResource.objects.count(),
    }


def visible_loans(user):
    """The dated quota loans a person sees: those of the groups they belong to or see beyond their
    own (``managed_group_ids``: all of them for the estate's roles), newest first."""
    rows = QuotaLoan.objects.select_related("lender__group", "borrower__group", "created_by")
    if not user.is_authenticated:
        return rows.none()
    managed = managed_group_ids(user)
    if managed is None:
        return rows
    groups = managed | member_group_ids(user)
    return rows.filter(Q(lender__group_id__in=groups) | Q(borrower__group_id__in=groups))


def loans_of(group_ids, *, active_only: bool = True):
    """The loans in or out of the given groups (active ones by default), by date."""
    rows = QuotaLoan.objects.select_related("lender__group", "borrower__group").filter(
        Q(lender__group_id__in=group_ids) | Q(borrower__group_id__in=group_ids)
    )
    if active_only:
        rows = rows.filter(state=QuotaLoan.State.ACTIVE)
    return rows.order_by("ends_at", "pk")
