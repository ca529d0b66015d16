"""Usage reports: GPU-hours, budget hours and cost by group (with its subtree), project, user, GPU
type or pool, over any whole-hour UTC range, counting only the usage the viewer may see.

A report reads the daily rollups for whole days, the hourly rollups for the hours around them and
the usage intervals only from where the rollups end (normally the current, open hour) (``usage``).
Quantities stay exact integers (GPU-microseconds) and money exact fractions until they are shown;
cost is priced at read time, per GPU type and price segment, so a price change shows at once. What
a report covers is ``report_spec``'s, who sees what ``visibility``'s, the unused capacity
``capacity``'s and the rows' labels ``labels``'.
"""

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import User
from apps.accounts.selectors import group_tree, managed_group_ids, subtree_ids
from apps.core.numbers import hours, money, percent
from apps.ledger import closed
from apps.ledger.capacity import UnusedCapacity, unused_capacity
from apps.ledger.labels import LABEL_COLUMNS, ViaAgent, row_labels
from apps.ledger.report_spec import DIMENSIONS, IDLE_SEPARATE, IDLE_SPREAD, ReportSpec
from apps.ledger.rollups import built_until
from apps.ledger.usage import DAY, MONEY_DENOMINATOR, PRICE_SCALE
from apps.ledger.visibility import visible
from apps.pools.models import GpuType


@dataclass
class Figures:
    gpu_us: int = 0
    budget_us: int = 0
    cost: Fraction = Fraction(0)
    idle_share: Fraction = Fraction(0)

    def add(self, gpu_us: int, budget_us: int, cost: Fraction, idle_share: Fraction) -> None:
        self.gpu_us += gpu_us
        self.budget_us += budget_us
        self.cost += cost
        self.idle_share += idle_share

    @property
    def gpu_hours(self) -> Decimal:
        return hours(self.gpu_us)

    @property
    def budget_hours(self) -> Decimal:
        return hours(self.budget_us)

    @property
    def cost_amount(self) -> Decimal:
        return money(self.cost)

    @property
    def idle_amount(self) -> Decimal:
        return money(self.idle_share)

    @property
    def total_cost(self) -> Decimal:
        return money(self.cost + self.idle_share)


@dataclass
class ReportRow:
    key: tuple
    labels: dict[str, str]
    figures: Figures = field(default_factory=Figures)


@dataclass
class Report:
    spec: ReportSpec
    stop: datetime  # the end of the range, or now when that is earlier
    rows: list[ReportRow]
    total: Figures
    unused: Figures | None  # unused capacity: all of it (separate) or the part no row used (spread)
    unpriced: dict[str, Decimal]  # GPU type -> GPU-hours used while it had no price
    rollups_until: datetime | None
    capacity: UnusedCapacity | None = None  # with idle cost: the capacity in force, per pool
    adjustments: list = field(default_factory=list)  # to closed months, booked in the range

    @property
    def adjustment_figures(self) -> Figures:
        line = Figures()
        for adjustment in self.adjustments:
            line.add(adjustment.gpu_us, adjustment.budget_us, closed.adjustment_cost(adjustment), Fraction(0))
        return line

    @property
    def capacity_us(self) -> int:
        return sum(self.capacity.capacity_us.values()) if self.capacity else 0

    @property
    def capacity_hours(self) -> Decimal:
        return hours(self.capacity_us)

    @property
    def capacity_used_hours(self) -> Decimal:
        return hours(sum(self.capacity.used_us.values()) if self.capacity else 0)

    @property
    def unused_share(self) -> Decimal | None:
        """The spread unused capacity's part of the total cost, in per cent."""
        return percent(self.total.idle_share, self.total.cost + self.total.idle_share)

    @property
    def utilisation(self) -> Decimal | None:
        """GPU-hours used on the counted pools over their capacity in force, in per cent."""
        if self.capacity is None:
            return None
        return percent(sum(self.capacity.used_us.values()), self.capacity_us)

    def columns(self) -> list[tuple[str, str, str]]:
        """(key, title, kind) of each column, the same on the page and in every export; kind is
        ``text``, ``hours`` or ``money``."""
        columns = [(key, title, "text") for dim in self.spec.dims for key, title in LABEL_COLUMNS[dim]]
        currency = self.spec.currency
        columns += [
            ("gpu_hours", "GPU-hours", "hours"),
            ("budget_hours", "Budget hours", "hours"),
            ("cost", f"Cost ({currency})", "money"),
        ]
        if self.spec.idle == IDLE_SPREAD:
            columns += [
                ("unused_capacity", f"Unused capacity share ({currency})", "money"),
                ("total_cost", f"Total cost ({currency})", "money"),
                ("unused_share", "Unused capacity in total cost (%)", "percent"),
            ]
        if self.spec.idle:
            columns.append(("utilisation", "Utilisation of capacity (%)", "percent"))
        return columns

    def _record(self, labels: dict[str, str], figures: Figures, budget: bool = True) -> dict:
        record = {key: labels.get(key, "") for key, _, kind in self.columns() if kind == "text"}
        record.update(
            gpu_hours=figures.gpu_hours,
            budget_hours=figures.budget_hours if budget else None,
            cost=figures.cost_amount,
        )
        if self.spec.idle == IDLE_SPREAD:
            record.update(
                unused_capacity=figures.idle_amount,
                total_cost=figures.total_cost,
                unused_share=percent(figures.idle_share, figures.cost + figures.idle_share),
            )
        if self.spec.idle:
            record["utilisation"] = None
        return record

    def records(self) -> list[dict]:
        records = [self._record(row.labels, row.figures) for row in self.rows]
        if self.capacity is not None and tuple(self.spec.dims) == ("pool",):
            for row, record in zip(self.rows, records, strict=True):
                record["utilisation"] = percent(
                    row.figures.gpu_us, self.capacity.capacity_us.get(row.key[0], 0)
                )
        return records

    def summary_records(self) -> list[dict]:
        """The lines below the rows: the total and, with idle cost, the unused capacity and the
        capacity in force with its utilisation (so an idle share is never read as use)."""
        first = self.columns()[0][0]
        lines = [self._record({first: "Total"}, self.total)]
        if self.unused is not None:
            title = "Unused capacity" if self.spec.idle == IDLE_SEPARATE else "Unused capacity not spread"
            lines.append(self._record({first: title}, self.unused, budget=False))
            line = {key: None for key, _, _ in self.columns()}
            line.update({key: "" for key, _, kind in self.columns() if kind == "text"})
            line.update({first: "Capacity in force", "gpu_hours": hours(self.capacity_us)})
            line["utilisation"] = self.utilisation
            lines.append(line)
        # Last, so the lines above keep their places: adjustments booked in the range (section 9).
        if self.adjustments:
            adjusted = Figures()
            for figures in (self.total, self.adjustment_figures):
                adjusted.add(figures.gpu_us, figures.budget_us, figures.cost, figures.idle_share)
            lines.append(self._record({first: "Adjustments to closed months"}, self.adjustment_figures))
            lines.append(self._record({first: "Total with adjustments"}, adjusted))
        return lines


def report_filter(spec: ReportSpec) -> Q:
    q = Q()
    if spec.group:
        q &= Q(group_id__in=subtree_ids([spec.group.pk]))
    for name in ("project", "user", "gpu_type", "pool"):
        value = getattr(spec, name)
        if value is not None:
            q &= Q(**{DIMENSIONS[name]: value.pk})
    return q


def _with_ancestors(group_id: int, parents: dict, shown: set[int] | None) -> list[int]:
    """The group and those of its ancestors the report shows (all with ``shown`` None)."""
    chain, node = [group_id], parents.get(group_id)
    while node is not None and node not in chain and (shown is None or node in shown):
        chain.append(node)
        node = parents.get(node)
    return chain


def _shown_groups(viewer: User, spec: ReportSpec) -> set[int] | None:
    managed = managed_group_ids(viewer)
    if spec.group:
        subtree = subtree_ids([spec.group.pk])
        return subtree if managed is None else subtree & managed
    return managed


def usage_report(viewer: User, spec: ReportSpec, now: datetime | None = None) -> Report:
    now = now or timezone.now()
    stop = max(spec.start, min(spec.end, now.astimezone(UTC)))
    rolled = built_until()
    segments = closed.report_segments(spec.currency, spec.start, stop)
    spread = spec.idle == IDLE_SPREAD
    names = list(dict.fromkeys([*(DIMENSIONS[d] for d in spec.dims), *(["pool_id"] if spread else [])]))
    if "user" in spec.dims:
        names.append("agent_id")  # an agent's usage gets its own lines under its owner (``ViaAgent``)
    where = visible(viewer) & report_filter(spec)
    sums = closed.usage_by(names, where, spec.start, stop, segments, rolled, spec.currency)
    unused = unused_capacity(spec, stop, segments, rolled) if spec.idle else None
    parents, groups = group_tree()
    figures, total, unpriced = _aggregate(
        spec, names, sums, segments, unused, parents, _shown_groups(viewer, spec), groups
    )
    figures = _at_level(spec, figures, groups)
    labels = row_labels(spec.dims, list(figures), parents, groups)
    return Report(
        spec=spec,
        stop=stop,
        rows=_rows(spec, figures, labels),
        total=total,
        unused=_unused_line(spec, unused),
        unpriced={GpuType.objects.get(pk=pk).name: hours(us) for pk, us in unpriced.items()},
        rollups_until=rolled,
        capacity=unused,
        adjustments=closed.adjustments(viewer, spec),
    )


def daily_reports(viewer: User, spec: ReportSpec, now: datetime | None = None) -> list[Report]:
    """``usage_report`` of each UTC day of ``spec``'s range (from a midnight), in the queries of
    one report whatever the number of days: the usage is read keyed by day as well. A range with
    unused capacity, or of four weeks or more (it may hold a closed month read whole from its
    frozen rows, which have no days), takes a report per day."""
    starts = [spec.start + timedelta(days=n) for n in range((spec.end - spec.start).days)]
    specs = [replace(spec, start=start, end=start + timedelta(days=1)) for start in starts]
    if spec.idle or spec.end - spec.start >= timedelta(days=28):
        return [usage_report(viewer, day, now) for day in specs]
    now = (now or timezone.now()).astimezone(UTC)
    stop = max(spec.start, min(spec.end, now))
    rolled = built_until()
    segments = closed.report_segments(spec.currency, spec.start, stop)
    names = [DIMENSIONS[d] for d in spec.dims] + (["agent_id"] if "user" in spec.dims else [])
    where = visible(viewer) & report_filter(spec)
    by_day: dict[date, dict] = defaultdict(dict)
    for (values, segment), entry in closed.usage_by(
        [*names, DAY], where, spec.start, stop, segments, rolled, spec.currency
    ).items():
        by_day[values[-1]][(values[:-1], segment)] = entry
    parents, groups = group_tree()
    shown = _shown_groups(viewer, spec)
    found = []
    for day in specs:
        sums = by_day[day.start.date()]
        figures, total, unpriced = _aggregate(day, names, sums, segments, None, parents, shown, groups)
        found.append((_at_level(spec, figures, groups), total, unpriced))
    labels = row_labels(spec.dims, [key for figures, _, _ in found for key in figures], parents, groups)
    gpu_types = dict(GpuType.objects.values_list("pk", "name")) if any(u for _, _, u in found) else {}
    adjustments = closed.adjustments(viewer, spec)
    return [
        Report(
            spec=day,
            stop=max(day.start, min(day.end, now)),
            rows=_rows(day, figures, labels),
            total=total,
            unused=None,
            unpriced={gpu_types[pk]: hours(us) for pk, us in unpriced.items()},
            rollups_until=rolled,
            adjustments=[a for a in adjustments if a.booked_in == day.start.date()],
        )
        for day, (figures, total, unpriced) in zip(specs, found, strict=True)
    ]


def _at_level(spec: ReportSpec, figures: dict, groups: dict) -> dict:
    if "group" in spec.dims and spec.level:
        at = spec.dims.index("group")
        return {k: f for k, f in figures.items() if groups[k[at]].kind == spec.level}
    return figures


def _rows(spec: ReportSpec, figures: dict, labels: dict) -> list[ReportRow]:
    return sorted(
        (ReportRow(key, labels[key], f) for key, f in figures.items()),
        key=lambda row: tuple(row.labels["group_path" if d == "group" else d] for d in spec.dims),
    )


def _aggregate(spec, names, sums, segments, unused, parents, shown, groups=None):
    """Price each sum, spread unused capacity over it, and add it to its row (for a cut by group,
    to the rows of the group and of its ancestors shown, or with ``spec.leaves`` to its own group's
    row only) and to the total. The total adds each sum once, whatever the rows overlap.

    Costs are summed as integers over ``MONEY_DENOMINATOR`` (every price has ``PRICE_SCALE``) and
    made fractions once per row: the same figures as adding fractions, without a gcd per sum. With
    ``groups`` and ``spec.level``, only the rows of groups of that kind are summed (``_at_level``
    keeps no other)."""
    dims = len(spec.dims)
    group_at = spec.dims.index("group") if "group" in spec.dims else None
    agent_at = names.index("agent_id") if "agent_id" in names else None
    pool_at = names.index("pool_id") if spec.idle == IDLE_SPREAD else None
    scaled = [None if s.per_gpu_hour is None else int(s.per_gpu_hour * PRICE_SCALE) for s in segments]
    sums_of: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, Fraction(0)])
    total = [0, 0, 0, Fraction(0)]
    unpriced: dict[int, int] = defaultdict(int)
    chains: dict[int, list[int]] = {}
    for (values, segment), (gpu, budget) in sums.items():
        price = scaled[segment] if segment >= 0 else None
        cost = 0
        if price is not None:
            cost = gpu * price
        elif gpu and segment >= 0:
            unpriced[segments[segment].gpu_type_id] += gpu
        share = Fraction(0)
        if pool_at is not None:
            pool_id = values[pool_at]
            if unused.used_us.get(pool_id):
                share = unused.cost[pool_id] * gpu / unused.used_us[pool_id]
        key = tuple(values[:dims])
        keys = [key]
        if group_at is not None and not spec.leaves:
            group_id = key[group_at]
            if group_id not in chains:
                chain = _with_ancestors(group_id, parents, shown)
                if groups is not None and spec.level:
                    chain = [g for g in chain if groups[g].kind == spec.level]
                chains[group_id] = chain
            keys = [(*key[:group_at], g, *key[group_at + 1 :]) for g in chains[group_id]]
        if agent_at is not None and values[agent_at] is not None:
            at, agent = spec.dims.index("user"), values[agent_at]
            keys += [(*k[:at], ViaAgent(k[at], agent), *k[at + 1 :]) for k in keys]
        for entry in (*(sums_of[row_key] for row_key in keys), total):
            entry[0] += gpu
            entry[1] += budget
            entry[2] += cost
            if share:
                entry[3] += share
    figures: dict[tuple, Figures] = defaultdict(Figures)
    for row_key, entry in sums_of.items():
        figures[row_key] = _figures(entry)
    return figures, _figures(total), unpriced


def _figures(entry: list) -> Figures:
    gpu, budget, cost, share = entry
    return Figures(gpu, budget, Fraction(cost, MONEY_DENOMINATOR), share)


def _unused_line(spec: ReportSpec, unused: UnusedCapacity | None) -> Figures | None:
    if unused is None:
        return None
    line = Figures()
    for pool_id, idle in unused.idle_us.items():
        if spec.idle == IDLE_SEPARATE or not unused.used_us[pool_id]:
            line.add(idle, 0, unused.cost[pool_id], Fraction(0))
    return line
