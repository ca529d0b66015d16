"""Writes for profiles, resource policies, compute resources and the three orderings.

Every write runs the rules of ``apps.policies.rules`` (through ``full_clean``) inside a transaction,
so a change that breaks one is refused whole, with the field and the reason.

Quota writes (a policy's reservation, limit or time budget) run one at a time per parent: each first
locks the rows it writes and their parent policy (``lock_policies``), then reads, checks and saves,
so two writes under one parent cannot both pass the sum rules on values the other is changing. A
write that comes from a form carries the ``version`` of each row the form showed; a row saved since
is refused with ``QuotaChanged`` (nothing saved), never overwritten.
"""

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from django.db import transaction
from django.db.models import Max

from apps.accounts.models import Group
from apps.core.audit import record_change
from apps.core.writes import validated_save
from apps.policies import rules, selectors
from apps.policies.models import (
    BudgetWindow,
    ComputeResource,
    PolicyChange,
    Profile,
    ProfilePool,
    ResourcePolicy,
)
from apps.policies.rules import fmt
from apps.pools.models import Pool


def create_profile(
    *,
    name: str,
    gpus,
    time_weight=1,
    size_from_task: bool = False,
    pools: Sequence[Pool] = (),
    description: str = "",
    sovereign_country: str = "",
    min_gpu_memory_gb: int | None = None,
    min_gpu_generation: int | None = None,
) -> Profile:
    """A new profile listing ``pools`` in that order; each must fit its sovereignty and minimum
    GPU memory and generation (``fit.pool_fit``), or nothing is saved."""
    with transaction.atomic():
        profile = validated_save(
            Profile(
                name=name,
                gpus=gpus,
                time_weight=time_weight,
                size_from_task=size_from_task,
                description=description,
                sovereign_country=sovereign_country,
                min_gpu_memory_gb=min_gpu_memory_gb,
                min_gpu_generation=min_gpu_generation,
            )
        )
        for pool in pools:
            link_pool(profile, pool)
        return profile


def update_profile(profile: Profile, **fields) -> Profile:
    """Change a profile; its connected policies are locked first, so that no limit is lowered below
    a GPU size growing at the same moment (the rule reads both), and the profile's row, so that no
    pool is linked while its sovereignty or GPU minimums change (``link_pool`` locks it too)."""
    with transaction.atomic():
        lock_policies(ResourcePolicy.objects.filter(compute_resources__profile=profile))
        list(
            Profile.objects.select_for_update(no_key=True).filter(pk=profile.pk).values_list("pk", flat=True)
        )
        return validated_save(profile, **fields)


def link_pool(profile: Profile, pool: Pool) -> ProfilePool:
    """Add a pool at the end of the profile's pool order and of the pool's execution order. The
    profile's and the pool's rows are locked and read as stored, so that the pool's fit
    (sovereignty, GPU minimums) is checked on values no other write is changing."""
    with transaction.atomic():
        existing = ProfilePool.objects.filter(profile=profile, pool=pool).first()
        if existing:
            return existing
        profile = Profile.objects.select_for_update(no_key=True).get(pk=profile.pk)
        pool = (
            Pool.objects.select_for_update(no_key=True, of=("self",))
            .select_related("gpu_type")
            .get(pk=pool.pk)
        )
        return validated_save(
            ProfilePool(
                profile=profile,
                pool=pool,
                pool_rank=next_pool_rank(profile),
                profile_rank=next_profile_rank(pool),
            )
        )


def next_pool_rank(profile: Profile) -> int:
    """The place at the end of a profile's pool order."""
    last = ProfilePool.objects.filter(profile=profile).aggregate(m=Max("pool_rank"))["m"]
    return 0 if last is None else last + 1


def next_profile_rank(pool: Pool) -> int:
    """The place at the end of a pool's execution order."""
    last = ProfilePool.objects.filter(pool=pool).aggregate(m=Max("profile_rank"))["m"]
    return 0 if last is None else last + 1


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
    links = {
        link.pool_id: link
        for link in ProfilePool.objects.select_for_update(no_key=True).filter(profile=profile)
    }
    _renumber(_in_given_order(links, [p.pk for p in pools], "pool order"), "pool_rank")


@transaction.atomic
def order_pools_newest_first(profile: Profile) -> list[Pool]:
    """Set the profile's pool order newest hardware first (``selectors.newest_first``); returns
    the pools in their new order."""
    links = (
        ProfilePool.objects.select_for_update(no_key=True, of=("self",))
        .filter(profile=profile)
        .select_related("pool__gpu_type")
    )
    pools = selectors.newest_first([link.pool for link in links.order_by("pool_rank", "pk")])
    set_pool_order(profile, pools)
    return pools


@transaction.atomic
def set_execution_order(pool: Pool, profiles: Sequence[Profile]) -> None:
    """Execution priority on a pool: which profile's work the pool places first."""
    links = {
        link.profile_id: link for link in ProfilePool.objects.select_for_update(no_key=True).filter(pool=pool)
    }
    _renumber(_in_given_order(links, [p.pk for p in profiles], "execution order"), "profile_rank")


@transaction.atomic
def set_queuing_order(profile: Profile, policies: Sequence[ResourcePolicy]) -> None:
    """Queuing priority on a profile: which group's work is placed first when several wait."""
    resources = {
        r.policy_id: r for r in ComputeResource.objects.select_for_update(no_key=True).filter(profile=profile)
    }
    _renumber(_in_given_order(resources, [p.pk for p in policies], "queuing order"), "queuing_rank")


def create_policy(
    *, group: Group, reservation, limit, budget_hours=None, budget_period: str = "", alert_threshold: int = 80
) -> ResourcePolicy:
    return save_policy(
        ResourcePolicy(
            group=group,
            reservation=reservation,
            limit=limit,
            budget_hours=budget_hours,
            budget_period=budget_period,
            alert_threshold=alert_threshold,
        )
    )


class QuotaChanged(Exception):
    """Someone else saved these policies after the form that carries their versions was rendered;
    nothing was saved. ``current``: the policies as stored now."""

    def __init__(self, current: Sequence[ResourcePolicy]):
        self.current = list(current)
        super().__init__(self.message)

    @property
    def message(self) -> str:
        names = [policy.group.name for policy in self.current]
        now = "; ".join(f"{policy.group.name}: {quota_text(policy)}" for policy in self.current)
        return (
            f"{' and '.join(names)} {'was' if len(names) == 1 else 'were'} changed by someone else since "
            f"you opened this page, so nothing was saved. Here are the current values ({now}); "
            "make your change on them and save again."
        )


def quota_text(policy: ResourcePolicy) -> str:
    budget = (
        f"time budget {fmt(policy.budget_hours)} h per {policy.budget_period}"
        if policy.has_budget
        else "no time budget"
    )
    for period, hours in extra_budgets_of(policy).items():
        budget += f" and {fmt(hours)} h per {period}"
    return f"reservation {fmt(policy.reservation)}, limit {fmt(policy.limit)}, {budget}"


def lock_policies(
    policies: Iterable[ResourcePolicy], *, versions: Mapping[int, int] | None = None
) -> dict[int, ResourcePolicy]:
    """Lock the rows a quota write reads and writes, until the transaction ends: each saved policy of
    ``policies`` and the parent policy of each (whose reservation, limit and budget its children
    share; every write under that parent locks it too, so they run one after the other and each
    reads the others' saved values). One statement locks them in primary-key order, so two writes
    never wait on each other in a cycle. On SQLite, which has no row locks, the settings' IMMEDIATE
    transactions serialize writers instead.

    ``versions``: {policy id: the version a form showed}; a row saved since raises ``QuotaChanged``.
    Returns the locked policies (parents included) as stored now, by id.
    """
    policies = list(policies)
    ids = {policy.pk for policy in policies if policy.pk is not None}
    ids |= selectors.parent_policy_ids_of({policy.group_id for policy in policies})
    locked = {
        policy.pk: policy
        for policy in ResourcePolicy.objects.select_for_update(no_key=True, of=("self",))
        .select_related("group")
        .filter(pk__in=ids)
        .order_by("pk")
    }
    stale = [
        locked[pk] for pk, seen in (versions or {}).items() if pk in locked and locked[pk].version != seen
    ]
    if stale:
        raise QuotaChanged(sorted(stale, key=lambda policy: policy.group.name))
    return locked


def save_policy(
    policy: ResourcePolicy, *, version: int | None = None, actor=None, via: str = ""
) -> ResourcePolicy:
    """Save a new policy, or every field of a changed one as set on ``policy`` (the admin's form),
    under the locks of ``lock_policies`` (the parents of its stored and its new group, if it moves).
    ``version``: the version the form showed (a form must pass it, or a newer save would be
    overwritten). With ``via``, a change is recorded in the audit trail."""
    with transaction.atomic():
        if policy.pk is None:
            lock_policies([policy])
            return validated_save(policy)
        stored = ResourcePolicy.objects.only("group").get(pk=policy.pk)
        seen = None if version is None else {policy.pk: version}
        current = lock_policies([policy, stored], versions=seen)[policy.pk]
        before = quota_of(current)
        validated_save(policy, version=current.version + 1)
        if via:
            record_quota_change(policy, before, actor=actor, via=via)
        return policy


def update_policy(
    policy: ResourcePolicy, *, version: int | None = None, actor=None, via: str = "", **fields
) -> ResourcePolicy:
    """Set ``fields`` on the policy as stored now (under the locks of ``lock_policies``) and save it
    checked. The other fields keep their stored values, whatever ``policy`` holds; ``policy`` is
    refreshed. ``version`` and ``via`` as for ``save_policy``."""
    with transaction.atomic():
        seen = None if version is None else {policy.pk: version}
        current = lock_policies([policy], versions=seen)[policy.pk]
        before = quota_of(current)
        validated_save(current, version=current.version + 1, **fields)
        if via:
            record_quota_change(current, before, actor=actor, via=via)
    for field in ResourcePolicy._meta.concrete_fields:
        setattr(policy, field.attname, getattr(current, field.attname))
    return policy


def connect(*, policy: ResourcePolicy, profile: Profile, name: str = "") -> ComputeResource:
    """Create the compute resource joining a policy to a profile, last in the profile's queuing order.

    Refused when the profile is larger than the policy's limit.
    """
    with transaction.atomic():
        policy = lock_policies([policy])[policy.pk]  # its limit cannot be lowered while connecting
        return validated_save(
            ComputeResource(
                name=name or f"{policy.group.slug}/{profile.name}",
                policy=policy,
                profile=profile,
                queuing_rank=last_queuing_rank(profile),
            )
        )


def last_queuing_rank(profile: Profile) -> int:
    """The queuing rank that puts a new compute resource last in the profile's queuing order."""
    last = ComputeResource.objects.filter(profile=profile).aggregate(m=Max("queuing_rank"))["m"]
    return 0 if last is None else last + 1


QUOTA_FIELDS = ("reservation", "limit", "budget_hours", "budget_period")
LENDING_FIELDS = ("lending", "over_quota_weight", "lendable")
AUDITED = (*QUOTA_FIELDS, *LENDING_FIELDS, "further_budgets")


def quota_of(policy: ResourcePolicy) -> dict:
    """The audited quota of a policy: its quota and lending fields and its further time budget
    windows, as text ("day 8.000; month 100.000", empty without any)."""
    quota = {field: getattr(policy, field) for field in (*QUOTA_FIELDS, *LENDING_FIELDS)}
    quota["further_budgets"] = windows_text(extra_budgets_of(policy))
    return quota


def extra_budgets_of(policy: ResourcePolicy) -> dict[str, Decimal]:
    """The further time budget windows of a policy as stored: {period: budget hours}, shortest
    period first (one query; none for an unsaved policy)."""
    if policy.pk is None:
        return {}
    rows = BudgetWindow.objects.filter(policy_id=policy.pk, hours__isnull=False)
    rows = rows.values_list("period", "hours")
    return dict(sorted(rows, key=lambda row: selectors.PERIOD_ORDER.get(row[0], 9)))


def windows_text(windows: Mapping[str, Decimal]) -> str:
    ordered = sorted(windows.items(), key=lambda item: selectors.PERIOD_ORDER.get(item[0], 9))
    return "; ".join(f"{period} {_audit_text(Decimal(hours))}" for period, hours in ordered)


def set_budget_windows(
    policy: ResourcePolicy,
    windows: Mapping[str, Decimal],
    *,
    version: int | None = None,
    actor=None,
    via: str = "",
) -> ResourcePolicy:
    """Replace the further time budget windows of a policy with ``windows`` ({period: budget
    hours}), under the locks of ``lock_policies`` and checked by ``rules.budget_window_errors``
    (``ValidationError`` under ``extra_budgets``). A change raises the policy's version; ``version``
    and ``via`` as for ``save_policy``."""
    windows = {period: Decimal(hours) for period, hours in windows.items()}
    with transaction.atomic():
        seen = None if version is None else {policy.pk: version}
        current = lock_policies([policy], versions=seen)[policy.pk]
        before = quota_of(current)
        if windows_text(windows) == before["further_budgets"]:
            return policy
        rules.raise_if(rules.budget_window_errors(current, windows))
        write_budget_windows(current, windows)
        current.version += 1
        ResourcePolicy.objects.filter(pk=current.pk).update(version=current.version)
        if via:
            record_quota_change(current, before, actor=actor, via=via)
    policy.version = current.version
    return policy


def write_budget_windows(policy: ResourcePolicy, windows: Mapping[str, Decimal]) -> None:
    """Store exactly ``windows`` as the policy's further windows (checked by the caller)."""
    time_windows = BudgetWindow.objects.filter(policy_id=policy.pk, hours__isnull=False)
    time_windows.exclude(period__in=list(windows)).delete()
    for period, hours in windows.items():
        BudgetWindow.objects.update_or_create(
            policy_id=policy.pk, period=period, hours__isnull=False, defaults={"hours": hours}
        )


def _audit_text(value):
    """A quota value for the audit trail: decimals with their three places."""
    if isinstance(value, Decimal):
        return str(value.quantize(Decimal("0.001")))
    return value


def record_quota_change(
    policy: ResourcePolicy, before: dict, *, actor, via: str, at=None, also: dict | None = None
) -> PolicyChange | None:
    """Write the audit record of a change to a policy's reservation, limit or time budget (each
    changed field before and after, with ``also``'s {field: [before, after]}); None when none of
    them changed."""
    after = quota_of(policy)
    changes = {
        f: [_audit_text(before.get(f)), _audit_text(after[f])] for f in AUDITED if before.get(f) != after[f]
    } | (also or {})
    if not changes:
        return None
    return record_change(PolicyChange, actor=actor, via=via, at=at, policy=policy, changes=changes)
