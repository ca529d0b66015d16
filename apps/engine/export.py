"""A recorded period as a simulator scenario (docs/whatif.md, "Export"), and how closely the
simulator's replay of it matches the record ("Fidelity"). Reads only.

The estate is taken as it stands now, with each policy's quota wound back to the period's start
through its audit trail (``PolicyChange``); the changes inside the period become events. Pools are
exported at their declared capacity at the period's start, from their capacity history
(``PoolCapacityChange``), and each change inside the period is a ``set_capacity`` event; their
maintenance windows in the period go with them. A dated quota loan is in the quota trail (via
``loan``), so its start and its give-back are ``set_*`` events like any quota change. Profiles
and compute resources carry their default and maximum time limits as now; the tasks' submits and
cancels, with their time limits, dependencies and capped arrays, are ``export_tasks``'. Money
budget windows are exported as they stand now, with the GPU prices of the pools at the period's
start in each currency a window counts (top-level ``prices``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from apps.accounts.models import Group
from apps.accounts.selectors import subtree_ids
from apps.core.gpus import to_milli
from apps.engine.export_tasks import TaskEvents
from apps.engine.models import DisabledWindow
from apps.policies.models import BudgetWindow, ComputeResource, PolicyChange, ProfilePool, ResourcePolicy
from apps.policies.selectors import money_windows, parent_policy_ids
from apps.pools.models import Pool
from apps.pools.selectors import capacity_history
from apps.pricing.selectors import prices_at

US = timedelta(microseconds=1)


class ExportError(ValueError):
    """Bad input, naming the option: ``--groups: unknown group 'x'``."""


def export(start: datetime, end: datetime, groups: list[str] | None = None) -> dict:
    """The scenario of [start, end) for the policies of ``groups`` (slugs) and their subtrees
    (default: all), as a JSON-ready dict that ``apps.engine.core.scenario.parse`` accepts."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ExportError("--start/--end: need a UTC offset")
    if end <= start:
        raise ExportError("--end: must be later than --start")
    return _Export(start.astimezone(UTC), end.astimezone(UTC), _scope(groups)).build()


def _scope(slugs: list[str] | None) -> set[int] | None:
    if not slugs:
        return None
    found = dict(Group.objects.filter(slug__in=slugs).values_list("slug", "pk"))
    for slug in slugs:
        if slug not in found:
            raise ExportError(f"--groups: unknown group {slug!r}")
    return subtree_ids(found.values())


def _num(value) -> int | float:
    d = Decimal(value)
    return int(d) if d == d.to_integral_value() else float(d)


def _milli_num(milli: int) -> int | float:
    return _num(Decimal(milli) / 1000)


def _time_limits(row) -> dict:
    """A profile's or compute resource's default and maximum time limits, those set."""
    limits = {"default_time_limit_s": row.default_time_limit_s, "max_time_limit_s": row.max_time_limit_s}
    return {key: value for key, value in limits.items() if value is not None}


def _dec(text) -> Decimal | None:
    return None if text in (None, "") else Decimal(str(text))


def _windows(text: str) -> dict[str, Decimal]:
    """The audit trail's further windows text, "day 8.000; month 100.000", as {period: hours}."""
    out = {}
    for part in (text or "").split(";"):
        if part.strip():
            period, hours = part.split()
            out[period] = Decimal(hours)
    return out


@dataclass
class _Quota:
    reservation: int
    limit: int
    budget_hours: Decimal | None
    budget_period: str
    further: dict[str, Decimal]


class _Export(TaskEvents):
    def __init__(self, start: datetime, end: datetime, scope: set[int] | None):
        self.start, self.end, self.scope = start, end, scope
        self.notes: list[str] = []
        self.events: list[tuple[int, int, dict]] = []  # (at_us, order, event)
        self.windows: dict[int, set[str]] = {}  # the budget windows (periods) of each policy
        self.quota_now: dict[int, list[int]] = {}  # [reservation, limit] as the events stand
        self.limits: dict[int, list[tuple[int, int]]] = defaultdict(list)  # (at_us, limit) from the start

    def at(self, when: datetime) -> int:
        return max(0, (when - self.start) // US)

    def event(self, when: datetime, order: int, body: dict) -> None:
        self.events.append((self.at(when), order, body))

    def build(self) -> dict:
        parents = parent_policy_ids()
        policies = {p.pk: p for p in ResourcePolicy.objects.select_related("group").order_by("pk")}
        chosen = {pk for pk, p in policies.items() if self.scope is None or p.group_id in self.scope}
        kept = set(chosen)
        for pk in chosen:
            up = parents.get(pk)
            while up is not None:
                kept.add(up)
                up = parents.get(up)
        resources = list(
            ComputeResource.objects.filter(policy_id__in=chosen)
            .select_related("policy__group", "profile")
            .order_by("pk")
        )
        tasks = self._tasks(resources)
        profiles = self._profiles(resources, tasks)
        largest = defaultdict(int)
        for r in resources:
            largest[r.policy_id] = max(largest[r.policy_id], profiles[r.profile_id]["size"])
        quota = self._quota_at_start(policies, kept)
        self.money = money_windows([policies[pk] for pk in kept])
        self.slug_of = {pk: p.group.slug for pk, p in policies.items()}
        policy_rows = [self._policy(policies[pk], quota[pk], parents, kept, largest) for pk in sorted(kept)]
        self._policy_events(policies, kept, quota, largest)
        self._engine_events()
        self._task_events(tasks, {f: row["row"]["size_from_task"] for f, row in profiles.items()})

        pool_ids = {pool for f in profiles.values() for pool in f["pools"]}
        pools = Pool.objects.filter(pk__in=pool_ids).order_by("pk")
        pool_names = {p.pk: p.name for p in pools}
        capacity_at_start = self._capacity_events(pools)
        execution = defaultdict(list)
        for link in ProfilePool.objects.filter(profile_id__in=profiles).order_by("profile_rank", "pk"):
            execution[pool_names[link.pool_id]].append(profiles[link.profile_id]["row"]["name"])
        queuing = defaultdict(list)
        for r in sorted(resources, key=lambda r: (r.queuing_rank, r.pk)):
            queuing[r.profile.name].append(r.policy.group.slug)
        self.events.sort(key=lambda e: (e[0], e[1]))
        description = f"Recorded period {self._iso(self.start)} to {self._iso(self.end)} (export_scenario)."
        if self.notes:
            description += " Adjusted or left out: " + "; ".join(self.notes) + "."
        return {
            "description": description,
            "start": self._iso(self.start),
            "duration_s": _num(Decimal((self.end - self.start) // US) / 1_000_000),
            "pools": [
                {"name": p.name, "capacity": _num(capacity_at_start[p.pk])} | self._maintenance(p)
                for p in pools
            ],
            "profiles": [f["row"] for f in profiles.values()],
            "policies": policy_rows,
            "compute_resources": [
                {"name": r.name, "policy": r.policy.group.slug, "profile": r.profile.name} | _time_limits(r)
                for r in resources
            ],
            "execution_order": dict(execution),
            "queuing_order": dict(queuing),
            "events": [{"at": _num(Decimal(at) / 1_000_000), **body} for at, _, body in self.events],
        } | self._prices(pools)

    def _prices(self, pools) -> dict:
        """The GPU prices of the pools at the start, in each currency a money window counts (as
        now: a money window is exported as it stands, not wound back to the start)."""
        currencies = sorted({c for by in self.money.values() for _, c in by.values()})
        prices = {}
        for currency in currencies:
            at = prices_at(currency, self.start)
            prices[currency] = {p.name: _num(at[p.gpu_type_id]) for p in pools if at.get(p.gpu_type_id)}
        return {"prices": prices} if prices else {}

    @staticmethod
    def _iso(when: datetime) -> str:
        return when.astimezone(UTC).isoformat().replace("+00:00", "Z")

    # -- estate -----------------------------------------------------------------------------

    def _profiles(self, resources, tasks) -> dict[int, dict]:
        """The profiles of the exported compute resources. A fixed-size profile with multi-node
        work in the period is exported as taking its sizes from its tasks, as the live loader does."""
        multi = {t.compute_resource.profile_id for t in tasks if t.nodes > 1}
        links = defaultdict(list)
        for link in ProfilePool.objects.select_related("pool").order_by("pool_rank", "pk"):
            links[link.profile_id].append(link.pool)
        out = {}
        for r in resources:
            f = r.profile
            if f.pk in out:
                continue
            row = {
                "name": f.name,
                "gpus": _num(f.gpus),
                "time_weight": _num(f.time_weight),
                "size_from_task": f.size_from_task or f.pk in multi,
                "pools": [p.name for p in links[f.pk]],
            }
            if f.min_runtime_s:
                row["min_runtime_s"] = f.min_runtime_s
            if f.starvation_s is not None:
                row["starvation_s"] = f.starvation_s
            if f.unlimited_before_maintenance:
                row["unlimited_before_maintenance"] = True
            row |= _time_limits(f)
            out[f.pk] = {"row": row, "size": to_milli(f.gpus), "pools": [p.pk for p in links[f.pk]]}
        return out

    def _quota_at_start(self, policies, kept) -> dict[int, _Quota]:
        """Each policy's quota as now, wound back through its audit records from the start on:
        a field's value at the start is the "before" of its first change since."""
        further = defaultdict(dict)
        for w in BudgetWindow.objects.filter(policy_id__in=kept, hours__isnull=False):
            further[w.policy_id][w.period] = w.hours
        quota = {}
        changes = defaultdict(list)
        for c in PolicyChange.objects.filter(policy_id__in=kept, at__gte=self.start).order_by("at", "pk"):
            changes[c.policy_id].append(c)
        for pk in kept:
            p = policies[pk]
            first = {}
            for c in changes[pk]:
                for field, (before, _) in c.changes.items():
                    first.setdefault(field, before)
            quota[pk] = _Quota(
                to_milli(_dec(first.get("reservation", p.reservation))),
                to_milli(_dec(first.get("limit", p.limit))),
                _dec(first["budget_hours"]) if "budget_hours" in first else p.budget_hours,
                first.get("budget_period", p.budget_period) or "",
                _windows(first["further_budgets"]) if "further_budgets" in first else dict(further[pk]),
            )
        self.changes = changes
        return quota

    def _policy(self, p, q: _Quota, parents, kept, largest) -> dict:
        limit = max(q.limit, q.reservation, largest[p.pk])
        if limit != q.limit:
            self.notes.append(
                f"limit of {p.group.slug} raised from {_milli_num(q.limit)} to {_milli_num(limit)}"
            )
        row = {"name": p.group.slug, "reservation": _milli_num(q.reservation), "limit": _milli_num(limit)}
        parent = parents.get(p.pk)
        if parent is not None and parent in kept:
            row["parent"] = self.slug_of[parent]
        windows = []
        if q.budget_hours is not None and q.budget_period:
            windows.append({"hours": _num(q.budget_hours), "period": q.budget_period})
        windows += [
            {"hours": _num(h), "period": period}
            for period, h in q.further.items()
            if period != q.budget_period
        ]
        self.windows[p.pk] = {w["period"] for w in windows}
        windows += [
            {"amount": _num(amount), "currency": currency, "period": period}
            for period, (amount, currency) in self.money.get(p.pk, {}).items()
        ]
        if len(windows) == 1:
            row["budget"] = windows[0]
        elif windows:
            row["budgets"] = windows
        if p.max_preemptions_per_hour is not None:
            row["max_preemptions_per_hour"] = p.max_preemptions_per_hour
        row |= self._sharing(p, q)
        self.quota_now[p.pk] = [q.reservation, limit]
        self.limits[p.pk].append((0, limit))
        return row

    def _sharing(self, p, q: _Quota) -> dict:
        """Lending, over-quota weight and lendable part as now, each only when not the default. A
        lendable part above the reservation at the start is lowered to it."""
        row = {}
        if p.lending != ResourcePolicy.Lending.PRIORITY:
            row["lending"] = str(p.lending)
        if p.over_quota_weight != 1:
            row["over_quota_weight"] = _num(p.over_quota_weight)
        if p.lendable is not None:
            lendable = min(to_milli(p.lendable), q.reservation)
            if lendable != to_milli(p.lendable):
                self.notes.append(
                    f"lendable of {p.group.slug} lowered from {_num(p.lendable)} to its reservation "
                    f"{_milli_num(lendable)}"
                )
            row["lendable"] = _milli_num(lendable)
        return row

    # -- events -----------------------------------------------------------------------------

    def _policy_events(self, policies, kept, quota, largest) -> None:
        """Each audited change inside the period, in its order: limit and reservation as
        set_limit / set_reservation (the raise first, so the pair stays valid), budget hours as
        set_budget of the window. A window added, removed or moved to another period is not."""
        skipped = raised = 0
        for pk in sorted(kept):
            name, period = policies[pk].group.slug, quota[pk].budget_period
            for c in self.changes[pk]:
                if c.at >= self.end:
                    break
                res, lim = self.quota_now[pk]
                new_res = to_milli(_dec(c.changes["reservation"][1])) if "reservation" in c.changes else res
                new_lim = to_milli(_dec(c.changes["limit"][1])) if "limit" in c.changes else lim
                if max(new_lim, new_res, largest[pk]) != new_lim:
                    new_lim, raised = max(new_lim, new_res, largest[pk]), raised + 1
                order = ["limit", "reservation"] if new_lim >= res else ["reservation", "limit"]
                for key in order:
                    value, was = (new_lim, lim) if key == "limit" else (new_res, res)
                    if value != was:
                        self.event(c.at, 0, {f"set_{key}": {"policy": name, key: _milli_num(value)}})
                if new_lim != lim:
                    self.limits[pk].append((self.at(c.at), new_lim))
                self.quota_now[pk] = [new_res, new_lim]
                if "budget_period" in c.changes:
                    skipped += 1
                    period = c.changes["budget_period"][1] or ""
                elif "budget_hours" in c.changes:
                    before, after = (_dec(v) for v in c.changes["budget_hours"])
                    if before is None or after is None or period not in self.windows[pk]:
                        skipped += 1
                    else:
                        self.event(
                            c.at, 0, {"set_budget": {"policy": name, "hours": _num(after), "period": period}}
                        )
                if "further_budgets" in c.changes:
                    before, after = (_windows(v) for v in c.changes["further_budgets"])
                    for w in sorted(set(before) | set(after)):
                        if w in before and w in after and w in self.windows[pk]:
                            if before[w] != after[w]:
                                hours = _num(after[w])
                                self.event(
                                    c.at, 0, {"set_budget": {"policy": name, "hours": hours, "period": w}}
                                )
                        else:
                            skipped += 1
        if raised:
            self.notes.append(f"{raised} limit change(s) below a reservation or profile size (raised to it)")
        if skipped:
            self.notes.append(f"{skipped} budget window(s) added, removed or moved to another period")

    def _maintenance(self, pool) -> dict:
        """The pool's maintenance windows that overlap the period (as they were kept: a window
        ended early ends then), in seconds from its start, clipped to the period."""
        windows = []
        for w in pool.maintenance_windows.filter(starts_at__lt=self.end, ends_at__gt=self.start):
            start, end = max(w.starts_at, self.start), min(w.end, self.end)
            if not w.called_off and start < end:
                note = {"note": w.note} if w.note else {}
                windows.append(
                    {
                        "start": _num(Decimal(self.at(start)) / 1_000_000),
                        "end": _num(Decimal(self.at(end)) / 1_000_000),
                    }
                    | note
                )
        return {"maintenance": windows} if windows else {}

    def _capacity_events(self, pools) -> dict[int, Decimal]:
        """Each pool's declared capacity at the start (0 for a pool created later), and a
        set_capacity event at each change of it inside the period. Whether a pool was enabled is
        not exported (the simulator's pools have no such state)."""
        history = capacity_history([p.pk for p in pools], self.start, self.end)
        at_start = {}
        for pool in pools:
            segments = history[pool.pk]
            at_start[pool.pk] = current = segments[0].capacity
            for segment in segments[1:]:
                if segment.capacity != current:
                    current = segment.capacity
                    self.event(
                        segment.start, 0, {"set_capacity": {"pool": pool.name, "capacity": _num(current)}}
                    )
        return at_start

    def _engine_events(self) -> None:
        windows = (
            DisabledWindow.objects.filter(start__lt=self.end).exclude(end__lte=self.start).order_by("start")
        )
        for w in windows:
            self.event(max(w.start, self.start), 0, {"engine": "disable"})
            if w.end is not None and w.end < self.end:
                self.event(w.end, 0, {"engine": "enable"})

    def _limit_at(self, policy_id: int, when: datetime) -> int:
        """The policy's limit as the exported events stand at ``when``."""
        at = self.at(when)
        return next(limit for since, limit in reversed(self.limits[policy_id]) if since <= at)


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"
