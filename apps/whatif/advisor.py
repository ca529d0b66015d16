"""The quota advisor (docs/whatif.md, "Quota advisor"): measure a recorded period per group from
the ledger's usage intervals and the measured guarantees, propose with ``advisor_core``, and prove
the proposal with a what-if run of the same period under it; accepted per group as a change
request (apps.governance)."""

from __future__ import annotations

import heapq
from dataclasses import asdict
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Max, Q, Sum
from django.utils import timezone

from apps.accounts.models import Group, Membership, User
from apps.accounts.selectors import groups_with_role, has_role, subtree_ids
from apps.engine.core.budget import period_bounds
from apps.governance import selectors as governance_selectors
from apps.governance import services as governance
from apps.governance.models import ChangeRequest
from apps.ledger.models import UsageInterval
from apps.policies.models import ComputeResource, ResourcePolicy
from apps.policies.selectors import budget_windows, parent_policy_ids
from apps.pools.models import Pool
from apps.pricing.selectors import currencies, prices_at
from apps.tasks import guarantee_selectors, guarantees
from apps.tasks.models import TaskEvent
from apps.whatif import advisor_core as core
from apps.whatif import services
from apps.whatif.models import AdvisorProposal

Role = Membership.Role
TITLE = "Quota advisor: {start:%Y-%m-%d} to {end:%Y-%m-%d}"


def _us(start: datetime, when: datetime | None) -> int | None:
    return None if when is None else (when - start) // timedelta(microseconds=1)


def _milli(gpus: Decimal) -> int:
    return int(gpus * core.MILLI)


def _windows(start: datetime, end: datetime, period: str) -> list[tuple[int, int]]:
    """The whole budget periods inside [start, end), in microseconds from ``start``."""
    found, at = [], period_bounds(start, period)[0]
    while at < end:
        w_start, w_end = period_bounds(at, period)
        if w_start >= start and w_end <= end:
            found.append((_us(start, w_start), _us(start, w_end)))
        at = w_end
    return found


def _starts(found, placed: dict[int, list], policies, start: datetime, end: datetime) -> dict[int, tuple]:
    """Per policy: the p95 time to start of all its runs that started in [start, end), and of those
    placed within its reservation, by the guarantees' own rule (``apps.tasks.guarantees.runs``).
    What the group held at each placement is summed here from the intervals already read (one
    sweep), not by ``guarantee_selectors``' query per interval, which is slow over a month; each
    placement is judged by the reservation in force then, as on the guarantee pages."""
    events: dict[int, list] = {}
    kinds = guarantee_selectors.KINDS
    read = TaskEvent.objects.filter(task__in=found.order_by().values("task_id"), kind__in=kinds, at__lt=end)
    for task, at, kind, reason in read.order_by().values_list("task_id", "at", "kind", "reason"):
        events.setdefault(task, []).append(guarantees.Event(task, at, kind, reason))
    earliest = min((row[0] for rows in placed.values() for row in rows), default=start)
    changes = guarantee_selectors.reservation_changes(policies, earliest)
    result = {}
    for p in policies:
        placements, open_ends, held = [], [], Decimal(0)
        for s, _, e, task, gpus in sorted(placed.get(p.pk, ()), key=lambda row: row[:2]):
            while open_ends and open_ends[0][0] <= s:
                held -= heapq.heappop(open_ends)[2]
            reserved = guarantees.reservation_at(p.reservation, changes.get(p.pk, ()), s)
            placements.append(guarantees.Placement(task, s, gpus, held, reserved))
            heapq.heappush(open_ends, (e or end + timedelta(days=1), task, gpus))
            held += gpus
        mine = [event for task in {pl.task for pl in placements} for event in events.get(task, ())]
        runs = guarantees.runs(placements, mine, p.reservation, p.guarantee_start_s)
        runs = [run for run in runs if start <= run.started_at < end]
        result[p.pk] = (
            guarantees.percentile([run.wait_s for run in runs], 95),
            guarantees.percentile([run.wait_s for run in runs if run.within], 95),
        )
    return result


def measure(start: datetime, end: datetime) -> tuple[list[core.Figures], int, dict[str, int]]:
    """Every group's figures over [start, end), the estate's capacity (milli-GPUs) and each
    policy's id by slug."""
    policies = list(ResourcePolicy.objects.select_related("group").order_by("group__slug"))
    parent_of = parent_policy_ids()
    by_pk = {p.pk: p for p in policies}
    found = UsageInterval.objects.filter(start__lt=end).filter(Q(end__isnull=True) | Q(end__gt=start))
    rows = found.order_by().values_list("pk", "policy_id", "task_id", "start", "end", "gpus", "time_weight")
    own: dict[int, list] = {}
    placed: dict[int, list] = {}
    for pk, policy, task, s, e, gpus, weight in rows:
        own.setdefault(policy, []).append((_us(start, s), _us(start, e), _milli(gpus), _milli(weight)))
        placed.setdefault(policy, []).append((s, pk, e, task, gpus))
    subtree: dict[int, list] = {p.pk: [] for p in policies}
    for policy, intervals in own.items():
        at = policy
        while at is not None and at in subtree:
            subtree[at].extend(intervals)
            at = parent_of.get(at)
    starts = _starts(found, placed, policies, start, end)
    profiles = dict(
        ComputeResource.objects.order_by()
        .values("policy_id")
        .annotate(largest=Max("profile__gpus"))
        .values_list("policy_id", "largest")
    )
    period_us = _us(start, end)
    figures = []
    for p in policies:
        intervals = subtree[p.pk]
        peak = None
        if p.budget_hours is not None:
            peak = core.budget_peak(intervals, _windows(start, end, p.budget_period))
        parent = by_pk.get(parent_of.get(p.pk))
        figures.append(
            core.Figures(
                name=p.group.slug,
                parent=parent.group.slug if parent else None,
                reservation_milli=_milli(p.reservation),
                limit_milli=_milli(p.limit),
                use=core.measure_use([i[:3] for i in intervals], period_us, _milli(p.reservation)),
                guarantee_start_s=p.guarantee_start_s,
                start_p95_s=starts[p.pk][0],
                reserved_start_p95_s=starts[p.pk][1],
                budget_hours=p.budget_hours,
                budget_period=p.budget_period,
                budget_peak_hours=peak,
                min_limit_milli=_milli(profiles.get(p.pk) or Decimal(0)),
            )
        )
    capacity = Pool.objects.filter(enabled=True).aggregate(total=Sum("capacity"))["total"] or Decimal(0)
    return figures, _milli(capacity), {p.group.slug: p.pk for p in policies}


def _gpus(milli: int) -> str:
    return str((Decimal(milli) / core.MILLI).normalize().quantize(Decimal("0.001")))


def _row(f: core.Figures, p: core.Proposal, name: str) -> dict:
    use = f.use
    return {
        "group": f.name,
        "name": name,
        "parent": f.parent,
        "current": {
            "reservation": _gpus(f.reservation_milli),
            "limit": _gpus(f.limit_milli),
            "budget_hours": None if f.budget_hours is None else str(f.budget_hours),
            "budget_period": f.budget_period,
        },
        "measured": {
            "gpu_hours": str(core.hours(use.gpu_units)),
            "borrowed_gpu_hours": str(core.hours(use.borrowed_units)),
            "idle_reserved_gpu_hours": str(core.hours(use.idle_units)),
            "peak_gpus": _gpus(use.peak_milli),
            "p95_gpus": _gpus(use.percentile_active(95)),
            "start_p95_s": f.start_p95_s,
            "reserved_start_p95_s": f.reserved_start_p95_s,
            "guarantee_start_s": f.guarantee_start_s,
            "budget_peak_hours": None if f.budget_peak_hours is None else str(f.budget_peak_hours),
        },
        "proposed": {
            "reservation": _gpus(p.reservation_milli),
            "limit": _gpus(p.limit_milli),
            "budget_hours": None if p.budget_hours is None else str(p.budget_hours),
            "budget_period": p.budget_period,
        },
        "reasons": list(p.reasons),
        "changed": _asked(f, p) != {},
    }


def _asked(f: core.Figures, p: core.Proposal) -> dict:
    """The proposed values that differ from the group's current ones, as a change request asks."""
    asked = {}
    if p.reservation_milli != f.reservation_milli:
        asked["reservation"] = Decimal(p.reservation_milli) / core.MILLI
    if p.limit_milli != f.limit_milli:
        asked["limit"] = Decimal(p.limit_milli) / core.MILLI
    if p.budget_hours is not None and Decimal(p.budget_hours) != f.budget_hours:
        asked["budget_hours"] = Decimal(p.budget_hours)
    return asked


def _with_further_windows(changes: dict, slugs: dict[str, int]) -> dict:
    """A proposed budget replaces the policy's main window only: its further time windows stay."""
    if "budgets" not in changes:
        return changes
    policies = ResourcePolicy.objects.filter(pk__in=[slugs[s] for s in changes["budgets"]])
    windows = budget_windows(policies)
    by_pk = {pk: slug for slug, pk in slugs.items()}
    for pk, periods in windows.items():
        main = changes["budgets"][by_pk[pk]]
        further = [{"hours": float(h), "period": w} for w, h in periods.items() if w != main["period"]]
        changes["budgets"][by_pk[pk]] = [main, *further] if further else main
    return changes


def propose(user: User | None, start: datetime, end: datetime, goals: core.Goals = core.GOALS):
    """Measure [start, end), propose, save the proposal and start its what-if run (the proof).
    Raises ``services.RunError`` for a period the what-if refuses (in the future, too long)."""
    figures, capacity, slugs = measure(start, end)
    tops = [f for f in figures if f.parent is None]
    envelope = max(capacity, sum(f.reservation_milli for f in tops))
    proposals = core.propose(
        figures, envelope, goals, top_limit_milli=max([capacity, *(f.limit_milli for f in tops)])
    )
    names = dict(Group.objects.filter(slug__in=list(slugs)).values_list("slug", "name"))
    changes = _with_further_windows(core.changes(figures, proposals), slugs)
    with transaction.atomic():
        run = services.start_run(
            user,
            services.RunRequest(
                start, end, [], changes, wait_threshold_s=3600, title=TITLE.format(start=start, end=end)
            ),
        )
        return AdvisorProposal.objects.create(
            created_by=user,
            start=start,
            end=end,
            goals=asdict(goals),
            groups=[_row(f, proposals[f.name], names.get(f.name, f.name)) for f in figures],
            run=run,
        )


def pool_costs(report: dict | None, start: datetime) -> tuple[str, dict[str, tuple[Decimal, Decimal]]]:
    """The cost of each pool's GPU-hours in the replays, recorded and proposed side by side, at its
    GPU type's price at the period's start in the estate's main currency (pools without a price
    left out): (currency, {pool: (recorded, proposed)})."""
    currency = currencies()[0]
    pools = (report or {}).get("base", {}).get("pools") or {}
    if not pools:
        return currency, {}
    price = prices_at(currency, start)
    gpu_type = dict(Pool.objects.filter(name__in=list(pools)).values_list("name", "gpu_type_id"))
    costs = {}
    for name, figures in pools.items():
        per_hour = price.get(gpu_type.get(name))
        if per_hour is not None:
            changed = report["changed"]["pools"][name]["gpu_hours"]
            costs[name] = tuple(
                (Decimal(str(hours)) * per_hour).quantize(Decimal("0.01"))
                for hours in (figures["gpu_hours"], changed)
            )
    return currency, costs


def last_month(now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the calendar month before ``now``'s, in UTC."""
    first = period_bounds(now, "month")[0]
    return period_bounds(first - timedelta(days=1), "month")[0], first


def propose_last_month(now: datetime | None = None) -> AdvisorProposal | None:
    """The monthly proposal (the beat task, hourly): for last month, once."""
    start, end = last_month(now or timezone.now())
    if AdvisorProposal.objects.filter(start=start, end=end, created_by=None).exists():
        return None
    return propose(None, start, end)


# -- who sees and accepts ----------------------------------------------------------------------


def visible_slugs(user: User) -> set[str] | None:
    """The groups whose proposals ``user`` sees: None for all (IT admins, leadership over the
    estate); a department head's and leadership's subtrees; empty for everyone else."""
    if has_role(user, Role.IT_ADMIN):
        return None
    roots = groups_with_role(user, Role.DEPARTMENT_HEAD, Role.LEADERSHIP)
    return set(Group.objects.filter(pk__in=subtree_ids(roots)).values_list("slug", flat=True))


def may_see_advisor(user: User) -> bool:
    return user.is_authenticated and visible_slugs(user) != set()


def rows_for(proposal: AdvisorProposal, user: User) -> list[dict]:
    seen = visible_slugs(user)
    return [row for row in proposal.groups if seen is None or row["group"] in seen]


def accept(proposal: AdvisorProposal, user: User, slug: str, values: dict | None = None) -> ChangeRequest:
    """File ``slug``'s proposal (or ``values``, the figures edited first: reservation, limit,
    budget_hours) as a change request of ``user``. Refused with ``PermissionDenied`` for a user who
    may not accept it, ``ValidationError`` for a group already accepted or nothing to change."""
    with transaction.atomic():
        proposal = AdvisorProposal.objects.select_for_update(no_key=True).get(pk=proposal.pk)
        row = next((r for r in proposal.groups if r["group"] == slug), None)
        group = Group.objects.filter(slug=slug).first()
        if row is None or group is None or not governance_selectors.may_accept_proposal(user, group):
            raise PermissionDenied(f"You may not accept the proposal for {slug}.")
        pending = proposal.accepted.get(slug)
        if pending and ChangeRequest.objects.filter(pk=pending, state=ChangeRequest.State.PENDING).exists():
            raise ValidationError(
                {"group": f"The proposal for {row['name']} is accepted already (request {pending})."}
            )
        asked = {k: v for k, v in (values or _proposed(row)).items() if v not in (None, "")}
        current = row["current"]
        asked = {
            k: v for k, v in asked.items() if current.get(k) is None or _number(k, v) != Decimal(current[k])
        }
        if not asked:
            raise ValidationError({"group": f"The proposal for {row['name']} changes nothing."})
        period = row["proposed"]["budget_period"] if "budget_hours" in asked else ""
        request = governance.file_request(
            requester=user,
            group=group,
            justification=_justification(proposal, row),
            budget_period=period,
            advised=True,
            **asked,
        )
        proposal.accepted[slug] = request.pk
        proposal.save(update_fields=["accepted"])
    return request


def _number(field: str, value) -> Decimal:
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValidationError({field: "Enter a number."}) from None
    if not number.is_finite():
        raise ValidationError({field: "Enter a finite number."})
    return number


def _proposed(row: dict) -> dict:
    return {k: row["proposed"][k] for k in ("reservation", "limit", "budget_hours")}


def _justification(proposal: AdvisorProposal, row: dict) -> str:
    m = row["measured"]
    return (
        f"Quota advisor for {proposal.start:%Y-%m-%d} to {proposal.end:%Y-%m-%d} "
        f"(what-if run {proposal.run_id}): {m['gpu_hours']} GPU-hours used, {m['borrowed_gpu_hours']} "
        f"borrowed, {m['idle_reserved_gpu_hours']} reserved idle; p95 time to start "
        f"{m['start_p95_s']} s against a guarantee of {m['guarantee_start_s']} s. "
        + "; ".join(row["reasons"])
    )
