"""Time budgets on the database: use per UTC calendar period computed from usage intervals.

Budget hours = wall hours x the profile's time weight, per task, from placement until the work
has really stopped (running intervals count up to ``now``). The spans registered in ``UNCHARGED``
are not charged: the engine registers the windows in which it was disabled. A policy's use
includes its subtree's, as its budget covers them.
Nothing here is a counter: every figure is recomputed from the intervals, so a missed or doubled
meter tick changes nothing.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone

from apps.core.gpus import to_milli
from apps.engine.core import UNITS_PER_HOUR, period_bounds
from apps.ledger.budgets_money import MoneyStatus, money_status, run_out_words  # noqa: F401  (re-exported)
from apps.ledger.models import UsageInterval
from apps.policies.models import ResourcePolicy
from apps.policies.selectors import budget_windows, parent_policy_ids, subtree_sums, subtrees_of

HOUR = Decimal(3600)
MICRO = timedelta(microseconds=1)
MICROS_PER_HOUR = 3600 * 10**6

Spans = Callable[[datetime, datetime], Iterable[tuple[datetime, datetime | None]]]
# Spans in which time budgets are not charged, registered from the AppConfig.ready of the app that
# knows them: name -> spans(since, now), the (start, end) of each span overlapping [since, now), end
# None while it lasts. The engine registers "engine": the windows in which it was disabled.
UNCHARGED: dict[str, Spans] = {}


@dataclass(frozen=True)
class BudgetStatus:
    """A policy's time budget in one window, or the summary of all its windows (then ``windows``
    holds each window's own status, and the other fields are those of the binding window)."""

    policy_id: int
    has_budget: bool
    period: str | None
    period_start: datetime
    resets_at: datetime
    budget_hours: Decimal | None
    used_hours: Decimal
    left_hours: Decimal | None
    burn_rate: Decimal
    projected_run_out: datetime | None
    alert_threshold: int
    used_up: bool
    gpu_hours: Decimal
    gpus_in_use: Decimal
    windows: tuple["BudgetStatus", ...] = ()

    @property
    def used_fraction(self) -> Decimal | None:
        if not self.has_budget:
            return None
        if not self.budget_hours:
            return Decimal(1)
        return self.used_hours / self.budget_hours

    @property
    def runs_out_in_period(self) -> bool:
        """The budget runs out before the period resets at the current burn rate."""
        return self.projected_run_out is not None and self.projected_run_out < self.resets_at

    def run_out_text(self) -> str:
        """When the budget runs out, in words: a run-out at or after the reset is no run-out."""
        if not self.has_budget:
            return "no budget"
        return run_out_words(self.used_up, self.projected_run_out, self.resets_at)

    @property
    def over_threshold(self) -> bool:
        """This window is at or above the alert threshold; for a policy's summary, any window is."""
        if self.windows:
            return any(w.over_threshold for w in self.windows)
        fraction = self.used_fraction
        return fraction is not None and fraction * 100 >= self.alert_threshold

    @property
    def window_name(self) -> str:
        """The window in words: "daily", "weekly", "monthly" (empty without a budget)."""
        return {"day": "daily", "week": "weekly", "month": "monthly"}.get(self.period or "", "")


@dataclass(frozen=True)
class ResourceBudget:
    """A compute resource's standing against the time budgets above it, in the reference's words:
    the one owner of "over budget" and "exempt". A profile of time weight 0 burns no budget hours,
    so its work runs while its policy's budget is used up: it is exempt, never over budget."""

    held_until: datetime | None
    exempt: bool = False

    @property
    def held(self) -> bool:
        return self.held_until is not None and not self.exempt

    def text(self) -> str:
        if self.exempt:
            return "exempt (time weight 0)"
        if self.held_until is not None:
            return f"over budget until {self.held_until:%Y-%m-%d %H:%M} UTC"
        return "ok"

    def explanation(self) -> str:
        if self.exempt:
            return (
                "Its profile's time weight is 0: its work uses no budget hours and runs when the "
                "budget is used up."
            )
        if self.held_until is not None:
            return (
                "The time budget of its policy or of a policy above it is used up: new work waits "
                "until the reset."
            )
        return "Budget hours are left, or its policy has no time budget."


def resource_budget(time_weight, held_until: datetime | None) -> ResourceBudget:
    """The standing of a compute resource whose profile has ``time_weight``, under a used-up
    budget that resets at ``held_until`` (None when no budget above it is used up)."""
    return ResourceBudget(held_until, exempt=Decimal(time_weight) == 0)


def _micros(duration) -> int:
    if duration is None:
        return 0
    if isinstance(duration, timedelta):
        return duration // MICRO
    return int(duration)


def _span(lo: datetime, hi: datetime):
    """Sum of the overlap of each interval with [lo, hi), running ones counted up to ``hi``; only
    the intervals that overlap it take part."""
    low = Value(lo, output_field=DateTimeField())
    high = Value(hi, output_field=DateTimeField())
    overlap = ExpressionWrapper(
        Least(Coalesce(F("end"), high), high) - Greatest(F("start"), low), output_field=DurationField()
    )
    return Sum(overlap, filter=Q(start__lt=hi) & (Q(end__isnull=True) | Q(end__gt=lo)))


def _merged(windows, now: datetime) -> list[tuple[datetime, datetime]]:
    """Uncharged windows as disjoint spans (an open one ends now), so none is taken out twice."""
    merged: list[list[datetime]] = []
    for start, end in sorted((start, end or now) for start, end in windows):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


# Sums per query: PostgreSQL allows 1,664 entries in a select list; a month of at most this many
# disabled-engine windows takes one query, each further batch one more.
CUTS_PER_QUERY = 400


def _charged_by_kind(kinds, now: datetime, policy_ids=None) -> dict[str, dict[int, tuple[int, Decimal]]]:
    """Per budget period kind, per policy (own tasks only): (budget units, GPU-microseconds) of the
    intervals inside the current period, running ones counted up to ``now``, with the uncharged
    windows (``UNCHARGED``: the disabled-engine ones) taken out of the budget units (GPU time is
    the ledger's and keeps them).

    Two queries whatever the number of kinds and policies (the windows, then one grouped query with
    a sum per kind and per (kind, window)), and one more per ``CUTS_PER_QUERY`` windows beyond the
    first batch. Budget units are the engine core's: milli-weight x microseconds, exact integers.
    With ``policy_ids``, only those policies' intervals are read."""
    kinds = sorted(set(kinds))
    if not kinds:
        return {}
    bounds = {}
    for kind in kinds:
        start, end = period_bounds(now, kind)
        bounds[kind] = (start, max(start, min(end, now)))
    earliest = min(start for start, _ in bounds.values())
    windows = _merged((span for spans in UNCHARGED.values() for span in spans(earliest, now)), now)
    spans = {f"span_{i}": _span(*bounds[kind]) for i, kind in enumerate(kinds)}
    cuts: list[tuple[str, str, object]] = []
    for i, kind in enumerate(kinds):
        start, stop = bounds[kind]
        for j, (w_start, w_end) in enumerate(windows):
            lo, hi = max(w_start, start), min(w_end, stop)
            if lo < hi:
                cuts.append((kind, f"cut_{i}_{j}", _span(lo, hi)))
    intervals = UsageInterval.objects.filter(start__lt=now).filter(Q(end__isnull=True) | Q(end__gt=earliest))
    if policy_ids is not None:
        intervals = intervals.filter(policy_id__in=sorted(policy_ids))
    intervals = intervals.values("policy_id", "time_weight", "gpus").order_by()
    batches = [cuts[i : i + CUTS_PER_QUERY] for i in range(0, len(cuts), CUTS_PER_QUERY)] or [[]]
    groups: dict[tuple, dict] = {}
    for n, batch in enumerate(batches):
        sums = {name: expression for _, name, expression in batch}
        for row in intervals.annotate(**(spans if n == 0 else {}), **sums):
            key = (row["policy_id"], row["time_weight"], row["gpus"])
            groups.setdefault(key, {}).update(row)
    cut_names = defaultdict(list)
    for kind, name, _ in cuts:
        cut_names[kind].append(name)
    result: dict[str, dict[int, list]] = {kind: defaultdict(lambda: [0, Decimal(0)]) for kind in kinds}
    for (policy_id, time_weight, gpus), row in groups.items():
        weight = to_milli(time_weight)
        for i, kind in enumerate(kinds):
            micros = max(_micros(row.get(f"span_{i}")), 0)
            if not micros:
                continue
            taken = sum(max(_micros(row.get(name)), 0) for name in cut_names[kind])
            entry = result[kind][policy_id]
            entry[0] += (micros - taken) * weight
            entry[1] += micros * gpus
    return {kind: {pk: (units, gpu_us) for pk, (units, gpu_us) in by.items()} for kind, by in result.items()}


def budget_units_used(
    policies, now: datetime, parents: dict[int, int | None], windows: dict[int, dict] | None = None
) -> dict[int, dict[str, int]]:
    """Budget units each budgeted policy (its subtree included) used in the current period of each
    of its windows: {policy id: {period: units}}, in a fixed number of queries (two, none without a
    budgeted policy; one more per 400 disabled windows in a period beyond the first 400; one more
    for the windows when ``windows``, from ``budget_windows``, is not given)."""
    policies = list(policies)
    if windows is None:
        windows = budget_windows(policies)
    budgeted = [p for p in policies if p.pk in windows]
    charged = _charged_by_kind(
        {period for p in budgeted for period in windows[p.pk]},
        now,
        subtrees_of({p.pk for p in budgeted}, parents),
    )
    subtree = {
        kind: subtree_sums({pk: units for pk, (units, _) in by.items()}, parents)
        for kind, by in charged.items()
    }
    return {p.pk: {period: subtree[period].get(p.pk, 0) for period in windows[p.pk]} for p in budgeted}


def budget_status(policies=None, now: datetime | None = None) -> dict[int, BudgetStatus]:
    """The time budget of each policy (all when ``policies`` is None) at ``now``: one status per
    policy that sums up its windows (the binding one: a used-up window, else the one with the
    fewest hours left), with each window's own status in ``windows``, main window first.

    Policies without a budget get their use in the current UTC month, for display. A fixed number
    of queries, whatever the number of policies and windows.
    """
    now = now or timezone.now()
    every = policies is None
    policies = list(ResourcePolicy.objects.all() if every else policies)
    if not policies:
        return {}
    parents = parent_policy_ids()
    windows = budget_windows(policies)
    kinds = {period for by in windows.values() for period in by}
    if len(windows) < len(policies):
        kinds.add("month")
    used = {}
    # Some policies: only the intervals of their subtrees count toward them.
    below = None if every else subtrees_of({p.pk for p in policies}, parents)
    for kind, charged in _charged_by_kind(kinds, now, below).items():
        used[kind] = (
            subtree_sums({pk: Decimal(v[0]) / UNITS_PER_HOUR for pk, v in charged.items()}, parents),
            subtree_sums({pk: v[1] / MICROS_PER_HOUR for pk, v in charged.items()}, parents),
        )
    running = (
        UsageInterval.objects.filter(end__isnull=True, start__lte=now)
        .values("policy_id")
        .annotate(weight=Sum("time_weight"), gpus=Sum("gpus"))
        .order_by()
    )
    rate = subtree_sums({r["policy_id"]: r["weight"] for r in running}, parents)
    in_use = subtree_sums({r["policy_id"]: r["gpus"] for r in running}, parents)

    def window(policy, kind: str, hours: Decimal | None) -> BudgetStatus:
        start, end = period_bounds(now, kind)
        by_kind = used.get(kind, ({}, {}))
        used_hours = Decimal(by_kind[0].get(policy.pk, 0)).quantize(Decimal("0.001"))
        left = None
        run_out = None
        burn = Decimal(rate.get(policy.pk, 0))
        if hours is not None:
            left = hours - used_hours
            if left > 0 and burn > 0:
                run_out = now + timedelta(seconds=float(left / burn * HOUR))
        return BudgetStatus(
            policy_id=policy.pk,
            has_budget=hours is not None,
            period=kind if hours is not None else None,
            period_start=start,
            resets_at=end,
            budget_hours=hours,
            used_hours=used_hours,
            left_hours=left,
            burn_rate=burn,
            projected_run_out=run_out,
            alert_threshold=policy.alert_threshold,
            used_up=left is not None and left <= 0,
            gpu_hours=Decimal(by_kind[1].get(policy.pk, 0)).quantize(Decimal("0.001")),
            gpus_in_use=Decimal(in_use.get(policy.pk, 0)),
        )

    result = {}
    for policy in policies:
        if policy.pk not in windows:
            result[policy.pk] = window(policy, "month", None)
            continue
        each = tuple(window(policy, kind, hours) for kind, hours in windows[policy.pk].items())
        result[policy.pk] = replace(_binding(each), windows=each)
    return result


def _binding(windows: tuple[BudgetStatus, ...]) -> BudgetStatus:
    """The window that holds the policy back: of the used-up ones the last to reset (work resumes
    only when every window has budget left), else the one with the fewest hours left."""
    used_up = [w for w in windows if w.used_up]
    if used_up:
        return max(used_up, key=lambda w: w.resets_at)
    return min(windows, key=lambda w: (w.left_hours, w.resets_at))
