"""The validation rules of profiles, resource policies and compute resources.

Each function returns ``{field: [message, ...]}`` so that model ``clean()``, the services, the
admin forms and the API all refuse bad input with the same words, naming the field.
"""

from collections import defaultdict
from decimal import Decimal

from django.core.exceptions import ValidationError

from apps.core.gpus import gpu_amount_error, gpu_size_error
from apps.policies.fit import pool_fit, related
from klique.numbers import duration

Errors = dict[str, list[str]]


def raise_if(errors: Errors) -> None:
    if errors:
        raise ValidationError(dict(errors))


def fmt(amount: Decimal | None) -> str:
    if amount is None:
        return "none"
    text = f"{Decimal(amount).normalize():f}"
    return text


def profile_errors(profile) -> Errors:
    from apps.policies.models import ComputeResource

    errors: Errors = defaultdict(list)
    size_error = gpu_size_error(profile.gpus)
    if size_error:
        errors["gpus"].append(f"GPU size: {size_error}")
    if profile.time_weight is None or profile.time_weight < 0:
        errors["time_weight"].append("Time weight must be 0 or more (0 exempts the profile).")
    if not size_error and profile.pk is not None:
        too_small = ComputeResource.objects.filter(profile=profile, policy__limit__lt=profile.gpus)
        for resource in too_small.select_related("policy__group"):
            errors["gpus"].append(
                f"GPU size {fmt(profile.gpus)} is larger than the limit ({fmt(resource.policy.limit)}) "
                f"of {resource.policy}, which compute resource {resource.name} connects to this profile."
            )
    for field, message in priority_errors(profile.default_priority, profile.max_priority):
        errors[field].append(message)
    limits = time_limit_errors(profile.default_time_limit_s, profile.max_time_limit_s)
    for field, message in zero_time_limit_errors(profile) + limits:
        errors[field].append(message)
    for field, messages in profile_links_errors(profile).items():
        errors[field].extend(messages)
    return errors


def policy_errors(policy) -> Errors:
    from apps.policies import selectors

    errors: Errors = defaultdict(list)
    for field in ("reservation", "limit"):
        value = getattr(policy, field)
        if value is None:
            errors[field].append(f"{field.capitalize()} is required.")
        elif gpu_amount_error(value):
            errors[field].append(f"{field.capitalize()}: {gpu_amount_error(value)}")
    if errors:
        return errors
    if policy.limit < policy.reservation:
        errors["limit"].append(
            f"Limit ({fmt(policy.limit)}) must be at least the reservation ({fmt(policy.reservation)})."
        )
    if policy.lendable is not None:
        if gpu_amount_error(policy.lendable):
            errors["lendable"].append(f"Lendable: {gpu_amount_error(policy.lendable)}")
        elif policy.lendable > policy.reservation:
            errors["lendable"].append(
                f"Lendable ({fmt(policy.lendable)}) cannot exceed the reservation "
                f"({fmt(policy.reservation)}); leave it empty to lend all of the reservation."
            )
    if policy.lending not in ("priority", "fair"):
        errors["lending"].append('Lending must be "priority" or "fair".')
    if policy.over_quota_weight is None or policy.over_quota_weight < 0:
        errors["over_quota_weight"].append("Over-quota weight must be 0 or more.")
    if policy.budget_hours is not None:
        if policy.budget_hours < 0:
            errors["budget_hours"].append("Time budget cannot be negative.")
        if not policy.budget_period:
            errors["budget_period"].append(
                "Choose the budget period (day, week or month) for the time budget."
            )
    elif policy.budget_period:
        errors["budget_hours"].append("Set the budget hours for the chosen period, or clear the period.")

    if policy.group_id is None:
        return errors
    parent = selectors.parent_policy(policy)
    if parent is not None:
        if policy.limit > parent.limit:
            errors["limit"].append(
                f"Limit ({fmt(policy.limit)}) cannot exceed the limit of the parent {parent} "
                f"({fmt(parent.limit)})."
            )
        siblings = [p for p in selectors.child_policies(parent) if p.pk != policy.pk]
        reserved = sum((p.reservation for p in siblings), Decimal("0")) + policy.reservation
        if reserved > parent.reservation:
            errors["reservation"].append(
                f"Reservation ({fmt(policy.reservation)}) brings the reservations under {parent} to "
                f"{fmt(reserved)}, above its reservation ({fmt(parent.reservation)})."
            )
        if parent.budget_hours is not None and policy.budget_hours is not None:
            if policy.budget_period != parent.budget_period:
                errors["budget_period"].append(
                    f"Budget period must match the parent {parent} ({parent.budget_period})."
                )
            else:
                budgeted = _window_sum(siblings, policy.budget_period) + policy.budget_hours
                if budgeted > parent.budget_hours:
                    errors["budget_hours"].append(
                        f"Time budget ({fmt(policy.budget_hours)} h) brings the budgets under {parent} to "
                        f"{fmt(budgeted)} h, above its budget ({fmt(parent.budget_hours)} h)."
                    )
    children = selectors.child_policies(policy)
    if children:
        child_reserved = sum((c.reservation for c in children), Decimal("0"))
        if child_reserved > policy.reservation:
            errors["reservation"].append(
                f"Reservation ({fmt(policy.reservation)}) is below the sum of the reservations of its "
                f"children ({fmt(child_reserved)})."
            )
        for child in children:
            if child.limit > policy.limit:
                errors["limit"].append(
                    f"Limit ({fmt(policy.limit)}) is below the limit of the child {child} "
                    f"({fmt(child.limit)})."
                )
        if policy.budget_hours is not None:
            child_budget = _window_sum(children, policy.budget_period)
            if child_budget > policy.budget_hours:
                errors["budget_hours"].append(
                    f"Time budget ({fmt(policy.budget_hours)} h) is below the sum of the budgets of its "
                    f"children ({fmt(child_budget)} h)."
                )
    if policy.pk is not None:
        stored = set(policy.extra_budgets.filter(hours__isnull=False).values_list("period", flat=True))
        if stored and policy.budget_hours is None:
            errors["budget_hours"].append(
                "The policy has further time budget windows; remove them before removing its time budget."
            )
        elif policy.budget_period in stored:
            errors["budget_period"].append(
                f"The policy already has a further time budget window per {policy.budget_period}; one "
                "window per period."
            )
        too_big = policy.compute_resources.filter(profile__gpus__gt=policy.limit).select_related("profile")
        for resource in too_big:
            errors["limit"].append(
                f"Limit ({fmt(policy.limit)}) is below the GPU size of profile {resource.profile} "
                f"({fmt(resource.profile.gpus)}), connected by compute resource {resource.name}."
            )
    return errors


def _window_sum(policies, period: str) -> Decimal:
    """The budget hours of the windows per ``period`` of ``policies`` (main or further ones)."""
    from apps.policies.selectors import budget_windows

    return sum((by[period] for by in budget_windows(policies).values() if period in by), Decimal("0"))


def budget_window_errors(policy, windows: dict[str, Decimal]) -> Errors:
    """The further time budget windows ``windows`` ({period: budget hours}) a policy is to have,
    besides its main one, checked (errors under ``extra_budgets``): none without the main time
    budget, none repeating its period, hours 0 or more, and each window inside the parent's window
    of the same period together with the siblings' (and at least the children's)."""
    from apps.policies import selectors
    from apps.policies.models import ResourcePolicy

    errors: Errors = defaultdict(list)
    field = "extra_budgets"
    if not windows:
        return errors
    periods = dict(ResourcePolicy.Period.choices)
    for period, hours in windows.items():
        if period not in periods:
            errors[field].append(f"Budget period {period!r} must be one of {', '.join(periods)}.")
        elif hours is None or hours < 0:
            errors[field].append(f"The time budget per {period} must be 0 budget hours or more.")
    if errors:
        return errors
    if policy.budget_hours is None:
        errors[field].append("Set the policy's time budget before adding further time budget windows.")
        return errors
    if policy.budget_period in windows:
        errors[field].append(
            f"The policy's time budget is already per {policy.budget_period}; one window per period."
        )
    if policy.group_id is None:
        return errors
    parent = selectors.parent_policy(policy)
    if parent is not None:
        parent_windows = selectors.budget_windows([parent]).get(parent.pk, {})
        siblings = [p for p in selectors.child_policies(parent) if p.pk != policy.pk]
        for period, hours in windows.items():
            if period in parent_windows:
                budgeted = _window_sum(siblings, period) + hours
                if budgeted > parent_windows[period]:
                    errors[field].append(
                        f"Time budget per {period} ({fmt(hours)} h) brings the budgets per {period} "
                        f"under {parent} to {fmt(budgeted)} h, above its budget per {period} "
                        f"({fmt(parent_windows[period])} h)."
                    )
    children = selectors.child_policies(policy) if policy.pk is not None else []
    for period, hours in windows.items():
        child_budget = _window_sum(children, period)
        if child_budget > hours:
            errors[field].append(
                f"Time budget per {period} ({fmt(hours)} h) is below the sum of the budgets per "
                f"{period} of its children ({fmt(child_budget)} h)."
            )
    return errors


def profile_links_errors(profile) -> Errors:
    """A profile's sovereignty and minimum GPU memory and generation hold for each pool it lists
    (errors under the requirement). Skipped while a form checks each link itself
    (``links_checked_by_form``)."""
    from apps.policies.models import ProfilePool

    errors: Errors = defaultdict(list)
    if profile.pk is None or profile.links_checked_by_form:
        return errors
    for link in ProfilePool.objects.filter(profile_id=profile.pk).select_related("pool__gpu_type"):
        for field, reason in pool_fit(profile, link.pool):
            errors[field].append(f"{reason} Remove the pool from the profile first.")
    return errors


def pool_errors(pool) -> Errors:
    """A pool's country and GPU type still meet each profile that lists it: a change that would
    break a sovereign profile (country) or a profile's minimum GPU memory or generation (GPU type)
    is refused, naming the profile."""
    from apps.policies.models import ProfilePool

    errors: Errors = defaultdict(list)
    if pool.pk is None or pool.links_checked_by_form:
        return errors
    for link in ProfilePool.objects.filter(pool_id=pool.pk).select_related("profile"):
        for field, reason in pool_fit(link.profile, pool):
            where = "country" if field == "sovereign_country" else "gpu_type"
            errors[where].append(f"{reason} Remove the pool from profile {link.profile} first.")
    return errors


def gpu_type_errors(gpu_type) -> Errors:
    """A GPU type's memory and generation still meet the minimum of each profile that lists one of
    its pools."""
    from apps.policies.models import ProfilePool

    errors: Errors = defaultdict(list)
    if gpu_type.pk is None:
        return errors
    links = ProfilePool.objects.filter(pool__gpu_type_id=gpu_type.pk).select_related("profile", "pool")
    for link in links:
        link.pool.gpu_type = gpu_type
        for field, reason in pool_fit(link.profile, link.pool):
            if field == "min_gpu_memory_gb":
                errors["memory_gb"].append(reason)
            elif field == "min_gpu_generation":
                errors["generation"].append(reason)
    return errors


def profile_pool_errors(link) -> Errors:
    """A pool fits the profile that lists it (``pool_fit``). Whether multi-node work allows the
    link is the tasks app's check (``apps.tasks.checks``)."""
    errors: Errors = defaultdict(list)
    profile, pool = related(link, "profile"), related(link, "pool")
    if profile is None or pool is None:
        return errors
    for _, reason in pool_fit(profile, pool):
        errors["pool"].append(reason)
    return errors


def priority_errors(default: int | None, maximum: int | None) -> list[tuple[str, str]]:
    """A default priority above the maximum a user may ask for is refused (on the default)."""
    if default is not None and maximum is not None and default > maximum:
        message = f"Default priority ({default}) cannot exceed the maximum priority ({maximum})."
        return [("default_priority", message)]
    return []


TIME_LIMIT_ZERO = "A time limit is at least 1 second; leave it empty for none."


def zero_time_limit_errors(item) -> list[tuple[str, str]]:
    """A time limit of 0 would stop work at once: refused on the field (empty means none)."""
    return [
        (name, TIME_LIMIT_ZERO)
        for name in ("default_time_limit_s", "max_time_limit_s")
        if getattr(item, name) == 0
    ]


def time_limit_errors(default: int | None, maximum: int | None) -> list[tuple[str, str]]:
    """A default time limit above the longest a user may ask for is refused (on the default)."""
    if default and maximum and default > maximum:
        message = (
            f"Default time limit ({duration(default)}) cannot exceed the maximum time limit "
            f"({duration(maximum)})."
        )
        return [("default_time_limit_s", message)]
    return []


def _own_or_profiles(resource, name: str):
    own = getattr(resource, name)
    return getattr(resource.profile, name) if own is None else own


def compute_resource_errors(resource) -> Errors:
    errors: Errors = defaultdict(list)
    if resource.policy_id is None or resource.profile_id is None:
        return errors
    policy, profile = resource.policy, resource.profile
    default = profile.default_priority if resource.default_priority is None else resource.default_priority
    maximum = profile.max_priority if resource.max_priority is None else resource.max_priority
    for field, message in priority_errors(default, maximum):
        if resource.default_priority is None:
            field, message = "max_priority", f"{message} (the default is the profile's)"
        errors[field].append(message)
    limits = [_own_or_profiles(resource, f"{which}_time_limit_s") for which in ("default", "max")]
    for field, message in time_limit_errors(*limits):
        if resource.default_time_limit_s is None:
            field, message = "max_time_limit_s", f"{message} (the default is the profile's)"
        errors[field].append(message)
    for field, message in zero_time_limit_errors(resource):
        errors[field].append(message)
    if profile.gpus > policy.limit:
        errors["profile"].append(
            f"Profile {profile} ({fmt(profile.gpus)} GPUs) is larger than the limit of {policy} "
            f"({fmt(policy.limit)} GPUs), so it cannot be connected to that policy."
        )
    return errors


def group_move_errors(group, new_parent) -> list[str]:
    """Why moving ``group`` (its subtree with it) under ``new_parent`` would break a policy's
    envelope: each policy in the subtree is checked by ``policy_errors`` against the tree as it
    would be. A dry run in a savepoint that is rolled back; nothing is kept."""
    from django.db import transaction

    from apps.accounts.models import Group
    from apps.accounts.selectors import subtree_ids
    from apps.core import memo
    from apps.policies.models import ResourcePolicy

    if group.pk is None or group.parent_id == getattr(new_parent, "pk", None):
        return []
    messages: list[str] = []
    try:
        with transaction.atomic():
            Group.objects.filter(pk=group.pk).update(parent=new_parent)
            memo.forget("groups")  # the request's group tree (apps.core.memo) is the old one
            inside = subtree_ids([group.pk])
            for policy in ResourcePolicy.objects.filter(group__in=inside).select_related("group"):
                for problems in policy_errors(policy).values():
                    messages += [f"{policy.group}: {problem}" for problem in problems]
            transaction.set_rollback(True)
    finally:
        memo.forget("groups")  # nor is the tree of the dry run, rolled back
    return messages
