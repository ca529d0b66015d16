"""The quota split of a group among the policies directly below it: who may split it, and the write
that sets the units' reservation, limit and time budgets together. The portal's split pages and the
API's ``/api/v1/splits/`` both go through it."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Group, Membership, User
from apps.accounts.selectors import groups_with_role, has_role, subtree_ids
from apps.policies import money_windows, services
from apps.policies.models import PolicyChange, ResourcePolicy
from apps.policies.rules import budget_window_errors, raise_if
from apps.policies.selectors import child_policies
from apps.policies.selectors import money_windows as stored_money_windows

Role = Membership.Role


def may_split_quota(user: User, group: Group) -> bool:
    """IT, the heads of the department (or of a department above it) and the tenant admins above
    it share out its quota; leadership shares out the organisation's among business units."""
    if group.kind == Group.Kind.ORGANISATION and group.pk in groups_with_role(user, Role.LEADERSHIP):
        return True
    if has_role(user, Role.IT_ADMIN):
        return True
    return group.pk in subtree_ids(groups_with_role(user, Role.DEPARTMENT_HEAD, Role.TENANT_ADMIN))


class SplitRefused(Exception):
    """A quota split broke a rule and nothing was saved. ``errors``: policy id -> {field: [message]}."""

    def __init__(self, errors: dict[int, dict[str, list[str]]]):
        super().__init__(errors)
        self.errors = errors


def _lowered(before: dict, after: dict) -> dict:
    """The decreases of a change alone. Applying every team's decreases before any increase makes
    a split that moves GPUs or hours from one team to another independent of the order of the rows."""
    step = {
        "reservation": min(before["reservation"], after["reservation"]),
        "limit": min(before["limit"], after["limit"]),
    }
    if after["budget_hours"] is None:
        step.update(budget_hours=None, budget_period="")
    elif before["budget_hours"] is not None and before["budget_period"] == after["budget_period"]:
        step["budget_hours"] = min(before["budget_hours"], after["budget_hours"])
    return step


def _lowered_windows(before: dict, after: dict) -> dict:
    """The decreases of a change of further windows alone: the windows kept, each at the lower of
    its hours before and after (a window dropped or new waits for the second step)."""
    return {period: min(hours, after[period]) for period, hours in before.items() if period in after}


def _set_windows(policy: ResourcePolicy, windows: dict) -> None:
    """Store the policy's further windows, checked as the admin and the API check them."""
    if windows != services.extra_budgets_of(policy):
        raise_if(budget_window_errors(policy, windows))
        services.write_budget_windows(policy, windows)


def split_quota(
    parent: ResourcePolicy, values: dict[int, dict], *, actor: User, versions: dict[int, int] | None = None
) -> list[PolicyChange]:
    """Set the reservation, limit and time budget of the policies directly below ``parent`` together,
    inside its totals. Every rule of ``apps.policies.rules`` is checked on the final split through
    ``update_policy``; if one is broken nothing is saved and ``SplitRefused`` names each broken rule.
    Each changed policy gets an audit record with the values before and after.

    The parent and its children are locked first (``lock_policies``), so splits and other quota
    writes under ``parent`` run one after the other. ``versions``: {policy id: version} of each row
    as the form showed it; when one was saved since, the split is refused whole with
    ``QuotaChanged`` (a stale form never overwrites a newer change).

    A row's ``money_budgets`` ({period: (amount, currency)}; left out or None: kept) replaces the
    unit's money windows, checked by ``money_windows.money_window_errors``: this is how leadership
    sets a business unit's monthly money cap."""
    children = {child.pk: child for child in child_policies(parent)}
    if set(values) - set(children):
        raise ValueError(f"policies not directly below {parent}: {sorted(set(values) - set(children))}")
    errors: dict[int, dict[str, list[str]]] = {}
    with transaction.atomic():
        locked = services.lock_policies(children.values(), versions=versions)
        children = {pk: locked[pk] for pk in children}
        before = {pk: services.quota_of(children[pk]) for pk in values}
        stored = {pk: services.extra_budgets_of(children[pk]) for pk in values}
        wanted = {pk: {f: row[f] for f in services.QUOTA_FIELDS} for pk, row in values.items()}
        windows = {
            pk: {p: Decimal(h) for p, h in row["extra_budgets"].items()}
            if row.get("extra_budgets") is not None
            else stored[pk]
            for pk, row in values.items()
        }
        stored_money = stored_money_windows([children[pk] for pk in values])
        money_before = {pk: stored_money.get(pk, {}) for pk in values}
        money = dict(money_before)
        for pk, row in values.items():
            if row.get("money_budgets") is not None:
                try:
                    money[pk] = money_windows.cleaned(row["money_budgets"])
                except ValidationError as error:
                    errors[pk] = error.message_dict
        money_changed = {
            pk: [money_windows.windows_text(money_before[pk]), money_windows.windows_text(money[pk])]
            for pk in values
            if money_windows.windows_text(money[pk]) != money_windows.windows_text(money_before[pk])
        }
        changed = {
            pk: new
            for pk, new in wanted.items()
            if any(before[pk][f] != new[f] for f in services.QUOTA_FIELDS)
            or windows[pk] != stored[pk]
            or pk in money_changed
        }
        for lowering in (True, False):
            for pk, new in changed.items():
                if pk in errors:
                    continue
                try:
                    if lowering:
                        _set_windows(children[pk], _lowered_windows(stored[pk], windows[pk]))
                        services.update_policy(children[pk], **_lowered(before[pk], new))
                    else:
                        services.update_policy(children[pk], **new)
                        _set_windows(children[pk], windows[pk])
                        if pk in money_changed:
                            money_windows.write_money_windows(children[pk], money[pk])
                except ValidationError as error:
                    errors[pk] = error.message_dict
        if errors:
            raise SplitRefused(errors)
        at = timezone.now()
        return [
            services.record_quota_change(
                children[pk],
                before[pk],
                actor=actor,
                via=PolicyChange.Via.PORTAL,
                at=at,
                also={money_windows.FIELD: money_changed[pk]} if pk in money_changed else None,
            )
            for pk in changed
        ]
