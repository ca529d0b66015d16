"""Usage reports: GPU-hours, budget hours and cost by group (with its subtree), project, user, GPU
type or pool, over any whole-hour UTC range, counting only the usage the viewer may see.

A report reads the daily rollups for whole days, the hourly rollups for the hours around them and
the usage intervals only from where the rollups end (normally the current, open hour). Quantities
stay exact integers (GPU-microseconds) and money exact fractions until they are shown; cost is
priced at read time, per GPU type and price segment, so a price change shows at once.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q, Sum
from django.utils import timezone

from apps.accounts.models import Group, Project, User
from apps.accounts.selectors import cost_centres, managed_group_ids, member_group_ids, subtree_ids
from apps.core.gpus import to_milli
from apps.ledger import closed
from apps.ledger.budgets import period_bounds
from apps.ledger.models import DailyGroupRollup, DailyRollup, HourlyRollup, UsageInterval
from apps.ledger.rollups import US_PER_HOUR, built_until, hourly_usage, overlapping, to_ms
from apps.pools.models import GpuType, Pool
from apps.pools.selectors import capacity_history
from apps.pricing.selectors import Segment, midnight

DIMENSIONS = {
    "group": "group_id",
    "project": "project_id",
    "user": "user_id",
    "gpu_type": "gpu_type_id",
    "pool": "pool_id",
}
PERIODS = ("day", "week", "month", "quarter", "custom")
IDLE_SEPARATE, IDLE_SPREAD = "separate", "spread"
PRICE_SCALE = 10**4  # prices have four decimals
MONEY_DENOMINATOR = US_PER_HOUR * PRICE_SCALE


def period_range(period: str, day: date) -> tuple[datetime, datetime]:
    """The UTC calendar period holding ``day``: a day, a week from Monday, a month, a quarter."""
    if period == "quarter":
        first = midnight(day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1))
        return first, (first + timedelta(days=93)).replace(day=1)
    return period_bounds(midnight(day), period)


def rounded(value: Fraction | int, places: int) -> Decimal:
    """Round half away from zero to ``places`` decimals, exactly (negative values are adjustments)."""
    scaled = abs(Fraction(value)) * 10**places
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest >= scaled.denominator:
        whole += 1
    return Decimal(-whole if value < 0 else whole).scaleb(-places)


def hours(us: int | Fraction) -> Decimal:
    return rounded(Fraction(us, US_PER_HOUR), 3)


def money(amount: Fraction) -> Decimal:
    return rounded(amount, 2)


def percent(part: Fraction | int, whole: Fraction | int) -> Decimal | None:
    """``part`` of ``whole`` in per cent with one decimal; None when ``whole`` is nothing."""
    return rounded(Fraction(part) * 100 / whole, 1) if whole else None


@dataclass(frozen=True)
class ReportSpec:
    """What a report covers. ``dims`` has one or two of DIMENSIONS; [start, end) is on whole UTC
    hours. ``group`` keeps its subtree; ``level`` keeps group rows of one kind; ``idle`` adds the
    unused capacity, shown separately or spread over the rows."""

    dims: tuple[str, ...]
    start: datetime
    end: datetime
    currency: str
    group: Group | None = None
    project: Project | None = None
    user: User | None = None
    gpu_type: GpuType | None = None
    pool: Pool | None = None
    level: str = ""
    idle: str = ""
    leaves: bool = False  # group rows count only their own usage, not their subtree's


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
    capacity: "UnusedCapacity | None" = None  # with idle cost: the capacity in force, per pool
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


LABEL_COLUMNS = {
    "group": [
        ("group", "Group"),
        ("group_kind", "Kind"),
        ("level", "Level"),
        ("group_path", "Path"),
        ("cost_centre", "Cost centre"),
    ],
    "project": [("project", "Project")],
    "user": [("user", "User")],
    "gpu_type": [("gpu_type", "GPU type")],
    "pool": [("pool", "Pool")],
}


# Who sees what: estate roles all usage, heads and leads their groups' subtrees, everyone their own.


def visible(viewer: User) -> Q:
    managed = managed_group_ids(viewer)
    if managed is None:
        return Q()
    return Q(user_id=viewer.pk) | Q(group_id__in=managed)


def may_see_unused_capacity(viewer: User) -> bool:
    """Unused capacity is estate-wide: IT, leadership and finance."""
    return managed_group_ids(viewer) is None


def refusal(viewer: User, spec: ReportSpec) -> str | None:
    """Why the viewer may not see this report (a 403), or None."""
    managed = managed_group_ids(viewer)
    if managed is None:
        return None
    if spec.idle:
        return "Unused capacity is estate-wide: only IT, leadership and finance see it."
    if spec.group and spec.group.pk not in managed | member_group_ids(viewer):
        return f"You may not see the usage of group {spec.group.slug}."
    if spec.user and spec.user.pk != viewer.pk and not managed:
        return "You may see only your own usage."
    return None


def scope(viewer: User) -> str:
    """What the viewer's reports count, in words."""
    managed = managed_group_ids(viewer)
    if managed is None:
        return "all usage of the estate"
    if managed:
        return "the usage of the groups you lead, with their subtrees, and your own"
    return "your own usage"


def visible_groups(viewer: User):
    managed = managed_group_ids(viewer)
    if managed is None:
        return Group.objects.all()
    return Group.objects.filter(pk__in=managed | member_group_ids(viewer))


def visible_projects(viewer: User):
    return Project.objects.filter(group__in=visible_groups(viewer)).select_related("group")


# Reading the ledger.


def _filters(spec: ReportSpec) -> Q:
    q = Q()
    if spec.group:
        q &= Q(group_id__in=subtree_ids([spec.group.pk]))
    for name in ("project", "user", "gpu_type", "pool"):
        value = getattr(spec, name)
        if value is not None:
            q &= Q(**{DIMENSIONS[name]: value.pk})
    return q


def _segment_filters(segments: list[Segment], field_name: str, by_day: bool) -> list[Q]:
    """The rollup rows of each price segment: its GPU type, from its start, until its end. Inner
    bounds are price changes, at midnight UTC, so they hold for daily rows too."""
    first, last = {}, {}
    for i, segment in enumerate(segments):
        first.setdefault(segment.gpu_type_id, i)
        last[segment.gpu_type_id] = i
    filters = []
    for i, segment in enumerate(segments):
        condition = Q(gpu_type_id=segment.gpu_type_id)
        if i != first[segment.gpu_type_id]:
            condition &= Q(**{f"{field_name}__gte": segment.start.date() if by_day else segment.start})
        if i != last[segment.gpu_type_id]:
            condition &= Q(**{f"{field_name}__lt": segment.end.date() if by_day else segment.end})
        filters.append(condition)
    return filters


def _fields_of(where: Q) -> set[str]:
    names = set()
    for child in where.children:
        names |= _fields_of(child) if isinstance(child, Q) else {child[0].split("__")[0]}
    return names


def _segment_of(segments: list[Segment]):
    by_type: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, segment in enumerate(segments):
        by_type[segment.gpu_type_id].append((to_ms(segment.end), i))

    def lookup(gpu_type_id: int, hour_ms: int) -> int:
        return next((i for end, i in by_type.get(gpu_type_id, []) if hour_ms < end), -1)

    return lookup


def _parts(start: datetime, stop: datetime, rolled: datetime | None, daily):
    """Split [start, stop) into rollup reads (model, period field, low, high) and the tail that
    is read from the intervals. Whole days come from ``daily``."""
    rolled_end = max(start, min(stop, rolled)) if rolled else start
    first_day = midnight(start.date()) + (
        timedelta(days=1) if start.time() != datetime.min.time() else timedelta()
    )
    last_day = midnight(rolled_end.date())
    if first_day < last_day:
        reads = [
            (HourlyRollup, "hour", start, first_day),
            (daily, "day", first_day.date(), last_day.date()),
            (HourlyRollup, "hour", last_day, rolled_end),
        ]
    else:
        reads = [(HourlyRollup, "hour", start, rolled_end)]
    return [r for r in reads if r[2] < r[3]], (rolled_end, stop)


def usage_by(names: list[str], where: Q, start: datetime, stop: datetime, segments: list[Segment], rolled):
    """{(values of ``names``, price segment index): [gpu_us, budget_us]} of the usage in
    [start, stop), from the rollups up to ``rolled`` and from the intervals after it.

    Whole days come from the daily rows without user and project when neither ``names`` nor
    ``where`` needs them. Rollup rows are grouped by ``names`` alone, with one filtered sum per
    price segment, so the database groups on plain columns (and plans for the real number of
    groups)."""
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    needs_user = {"user_id", "project_id"} & ({*names} | _fields_of(where))
    reads, (live_start, live_stop) = _parts(
        start, stop, rolled, DailyRollup if needs_user else DailyGroupRollup
    )
    for model, field_name, low, high in reads:
        sums_per_segment = {}
        for i, condition in enumerate(_segment_filters(segments, field_name, by_day=field_name == "day")):
            sums_per_segment[f"gpu_{i}"] = Sum("gpu_us", filter=condition)
            sums_per_segment[f"budget_{i}"] = Sum("budget_us", filter=condition)
        rows = (
            model.objects.filter(where, **{f"{field_name}__gte": low, f"{field_name}__lt": high})
            .values(*names)
            .annotate(**sums_per_segment)
            .order_by()
        )
        for row in rows:
            key = tuple(row[n] for n in names)
            for i in range(len(segments)):
                if row[f"gpu_{i}"] is not None:
                    entry = sums[(key, i)]
                    entry[0] += row[f"gpu_{i}"]
                    entry[1] += row[f"budget_{i}"]
    if live_start < live_stop:
        segment_of = _segment_of(segments)
        intervals = (
            overlapping(UsageInterval.objects.filter(where), live_start, live_stop)
            .order_by("start")
            .values_list("start", "end", "gpus", "time_weight", "gpu_type_id", *names)
        )
        # A plain fetch (the open hour is small) lets the database plan for all of its rows.
        pieces = hourly_usage(list(intervals), to_ms(live_start), to_ms(live_stop))
        for hour, (gpu_type_id, *key), gpu, budget in pieces:
            entry = sums[(tuple(key), segment_of(gpu_type_id, hour))]
            entry[0] += gpu
            entry[1] += budget
    return sums


@dataclass
class UnusedCapacity:
    """Capacity in force x hours minus the GPU-hours used, per pool, priced."""

    idle_us: dict[int, int]
    cost: dict[int, Fraction]
    used_us: dict[int, int]
    capacity_us: dict[int, int] = field(default_factory=dict)  # capacity in force x time


def _capacity_us(history, start: datetime, end: datetime) -> int:
    """GPU-microseconds of capacity in force in [start, end) (milli-GPUs x milliseconds)."""
    return sum(
        to_milli(c.in_force) * (to_ms(min(c.end, end)) - to_ms(max(c.start, start)))
        for c in history
        if c.start < end and c.end > start
    )


def unused_capacity(spec: ReportSpec, stop: datetime, segments: list[Segment], rolled) -> UnusedCapacity:
    """Per pool, the capacity in force at each moment of the range (its capacity history, so a
    pool resized or disabled since counts as it was then) less what was used, priced."""
    pools = Pool.objects.all()
    if spec.pool:
        pools = pools.filter(pk=spec.pool.pk)
    if spec.gpu_type:
        pools = pools.filter(gpu_type_id=spec.gpu_type.pk)
    pools = list(pools)
    history = capacity_history([p.pk for p in pools], spec.start, stop)
    pools = [p for p in pools if any(c.in_force > 0 for c in history[p.pk])]
    where = Q(pool_id__in=[p.pk for p in pools])
    used = closed.usage_by(["pool_id"], where, spec.start, stop, segments, rolled, spec.currency)
    used_in: dict[tuple[int, int], int] = defaultdict(int)
    for ((pool_id,), segment), (gpu, _) in used.items():
        used_in[(pool_id, segment)] += gpu
    result = UnusedCapacity({}, {}, {})
    for pool in pools:
        idle, cost, capacity = 0, Fraction(0), 0
        for i, segment in enumerate(segments):
            if segment.gpu_type_id != pool.gpu_type_id:
                continue
            in_force = _capacity_us(history[pool.pk], segment.start, segment.end)
            capacity += in_force
            free = max(0, in_force - used_in[(pool.pk, i)])
            idle += free
            if segment.per_gpu_hour is not None:
                cost += Fraction(free * int(segment.per_gpu_hour * PRICE_SCALE), MONEY_DENOMINATOR)
        result.idle_us[pool.pk] = idle
        result.cost[pool.pk] = cost
        result.used_us[pool.pk] = sum(gpu for (pool_id, _), gpu in used_in.items() if pool_id == pool.pk)
        result.capacity_us[pool.pk] = capacity
    return result


# Labels and the group tree.


def _group_tree() -> tuple[dict[int, int | None], dict[int, Group]]:
    groups = {g.pk: g for g in Group.objects.all()}
    return {pk: g.parent_id for pk, g in groups.items()}, groups


def group_labels(pks) -> dict[int, tuple[str, str]]:
    """Each group's name and path from the organisation ("Acme Labs / Research / ...")."""
    parents, groups = _group_tree()
    return {pk: (groups[pk].name, _group_path(pk, parents, groups)) for pk in pks if pk in groups}


def _group_path(pk: int, parents: dict, groups: dict) -> str:
    names, node, seen = [], pk, set()
    while node is not None and node not in seen:
        names.append(groups[node].name)
        seen.add(node)
        node = parents.get(node)
    return " / ".join(reversed(names))


def _labels(dims: tuple[str, ...], keys, parents, groups) -> dict[tuple, dict[str, str]]:
    ids = {dim: {key[i] for key in keys} for i, dim in enumerate(dims)}
    names: dict[str, dict] = {}
    if "project" in ids:
        names["project"] = {p.pk: str(p) for p in Project.objects.filter(pk__in=ids["project"] - {None})}
        names["project"][None] = "(no project)"
    if "user" in ids:
        names["user"] = dict(User.objects.filter(pk__in=ids["user"]).values_list("pk", "username"))
    if "gpu_type" in ids:
        names["gpu_type"] = dict(GpuType.objects.filter(pk__in=ids["gpu_type"]).values_list("pk", "name"))
    if "pool" in ids:
        names["pool"] = dict(Pool.objects.filter(pk__in=ids["pool"]).values_list("pk", "name"))
    centres = cost_centres() if "group" in ids else {}
    result = {}
    for key in keys:
        labels = {}
        for i, dim in enumerate(dims):
            if dim == "group":
                group = groups[key[i]]
                labels.update(
                    group=group.name,
                    group_kind=group.get_kind_display(),
                    level=_depth(group.pk, parents),
                    group_path=_group_path(group.pk, parents, groups),
                    cost_centre=centres.get(group.pk, ""),
                )
            else:
                labels[dim] = names[dim].get(key[i], "")
        result[key] = labels
    return result


def _depth(pk: int, parents: dict) -> int:
    """How far below the organisation a group is: 0 for it, 1 for a business unit, and so on."""
    depth, node, seen = 0, parents.get(pk), {pk}
    while node is not None and node not in seen:
        depth += 1
        seen.add(node)
        node = parents.get(node)
    return depth


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
    where = visible(viewer) & _filters(spec)
    sums = closed.usage_by(names, where, spec.start, stop, segments, rolled, spec.currency)
    unused = unused_capacity(spec, stop, segments, rolled) if spec.idle else None
    parents, groups = _group_tree()
    figures, total, unpriced = _aggregate(
        spec, names, sums, segments, unused, parents, _shown_groups(viewer, spec)
    )
    if "group" in spec.dims and spec.level:
        at = spec.dims.index("group")
        figures = {k: f for k, f in figures.items() if groups[k[at]].kind == spec.level}
    labels = _labels(spec.dims, list(figures), parents, groups)
    rows = sorted(
        (ReportRow(key, labels[key], f) for key, f in figures.items()),
        key=lambda row: tuple(row.labels["group_path" if d == "group" else d] for d in spec.dims),
    )
    return Report(
        spec=spec,
        stop=stop,
        rows=rows,
        total=total,
        unused=_unused_line(spec, unused),
        unpriced={GpuType.objects.get(pk=pk).name: hours(us) for pk, us in unpriced.items()},
        rollups_until=rolled,
        capacity=unused,
        adjustments=closed.adjustments(viewer, spec),
    )


def _aggregate(spec, names, sums, segments, unused, parents, shown):
    """Price each sum, spread unused capacity over it, and add it to its row (for a cut by group,
    to the rows of the group and of its ancestors shown, or with ``spec.leaves`` to its own group's
    row only) and to the total. The total adds each sum once, whatever the rows overlap."""
    dims = len(spec.dims)
    group_at = spec.dims.index("group") if "group" in spec.dims else None
    figures: dict[tuple, Figures] = defaultdict(Figures)
    total = Figures()
    unpriced: dict[int, int] = defaultdict(int)
    for (values, segment), (gpu, budget) in sums.items():
        price = segments[segment].per_gpu_hour if segment >= 0 else None
        cost = Fraction(0)
        if price is not None:
            cost = Fraction(gpu * int(price * PRICE_SCALE), MONEY_DENOMINATOR)
        elif gpu and segment >= 0:
            unpriced[segments[segment].gpu_type_id] += gpu
        share = Fraction(0)
        if spec.idle == IDLE_SPREAD:
            pool_id = values[names.index("pool_id")]
            if unused.used_us.get(pool_id):
                share = unused.cost[pool_id] * gpu / unused.used_us[pool_id]
        key = tuple(values[:dims])
        keys = [key]
        if group_at is not None and not spec.leaves:
            ancestors = _with_ancestors(key[group_at], parents, shown)
            keys = [(*key[:group_at], g, *key[group_at + 1 :]) for g in ancestors]
        for row_key in keys:
            figures[row_key].add(gpu, budget, cost, share)
        total.add(gpu, budget, cost, share)
    return figures, total, unpriced


def _unused_line(spec: ReportSpec, unused: UnusedCapacity | None) -> Figures | None:
    if unused is None:
        return None
    line = Figures()
    for pool_id, idle in unused.idle_us.items():
        if spec.idle == IDLE_SEPARATE or not unused.used_us[pool_id]:
            line.add(idle, 0, unused.cost[pool_id], Fraction(0))
    return line
