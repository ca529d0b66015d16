"""The quota advisor's rule (docs/whatif.md, "Quota advisor"), pure and exact: from a recorded
period's figures per group, a proposed reservation, limit and budget aimed at the goals below,
inside the parents' envelopes. No Django: GPUs are milli-GPU integers, time microseconds.

    measure_use(intervals, period_us, reservation_milli) -> Use
    budget_peak(intervals, windows) -> budget hours used in the busiest whole budget period
    propose(figures, capacity_milli, goals=Goals()) -> {group: Proposal}

The goals (``Goals``, with their defaults):

* **Guarantee**: work that waited past the policy's guarantee (p95 time to start of all its work
  above ``guarantee_start_s``) gets its peak in use reserved, so it would start as reserved work;
  a group whose reserved work missed its guarantee is never proposed a smaller reservation.
* **Idle reserved GPUs**: otherwise the reservation is the largest whole number of GPUs left idle
  at most ``idle_reserved_max_pct`` % of the period (idle reserved GPU-hours / reserved GPU-hours).
* **Limit**: at least the ``limit_percentile`` of the GPUs in use while the group had work, plus
  ``limit_headroom_pct`` %, rounded up to whole GPUs; never below the reservation, the peak in use
  (a limit is not lowered below what the group used) or the largest profile connected; unless
  ``lower_limits``, never below the current limit either (a lower limit only makes work wait).
* **Budget** (groups with a time budget only): the budget hours used in the busiest whole budget
  period of the recorded period plus ``budget_headroom_pct`` %, rounded up to whole hours.
* **Envelope**: a parent is proposed at least the sum of its children's reservations (budgets of
  the same period) and the largest child limit; going down, children whose wishes exceed the
  parent's are cut in proportion (whole GPUs or hours, the remainders by size then name); top-level
  groups share the estate's capacity. A group with no use and no wait in the period keeps its
  figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal

MILLI = 1000
US_PER_HOUR = 3_600_000_000
GPU_UNITS_PER_HOUR = MILLI * US_PER_HOUR  # one GPU for one hour, in milli-GPU microseconds
BUDGET_UNITS_PER_HOUR = MILLI * MILLI * US_PER_HOUR  # ... times a milli time weight
HOURS_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class Goals:
    idle_reserved_max_pct: int = 20
    limit_percentile: int = 95
    limit_headroom_pct: int = 25
    budget_headroom_pct: int = 20
    lower_limits: bool = False  # a limit is only raised: a lower one only makes work wait
    gpu_step_milli: int = MILLI
    budget_step_hours: int = 1


GOALS = Goals()


@dataclass(frozen=True)
class Use:
    """A group's GPUs in use over a period (its subtree's intervals)."""

    period_us: int
    peak_milli: int = 0
    active_us: int = 0
    levels: tuple[tuple[int, int], ...] = ()  # (milli-GPUs in use, microseconds at that level)
    largest_milli: int = 0
    gpu_units: int = 0
    borrowed_units: int = 0
    idle_units: int = 0

    def percentile_active(self, p: int) -> int:
        """The smallest level in use at or above which the group spent at most 100 - p % of its
        active time (nearest rank over time); 0 with no activity."""
        if not self.active_us:
            return 0
        seen = 0
        for level, us in sorted(lv for lv in self.levels if lv[0] > 0):
            seen += us
            if 100 * seen >= p * self.active_us:
                return level
        return self.peak_milli


def measure_use(intervals, period_us: int, reservation_milli: int) -> Use:
    """``intervals``: (start_us, end_us or None, milli-GPUs) relative to the period's start; each
    clipped to [0, period_us). Borrowed: GPU time in use above the reservation; idle: reserved GPU
    time not in use."""
    steps: dict[int, int] = {}
    largest = 0
    for start, end, milli in intervals:
        start, end = max(start, 0), min(period_us if end is None else end, period_us)
        if end <= start or milli <= 0:
            continue
        steps[start] = steps.get(start, 0) + milli
        steps[end] = steps.get(end, 0) - milli
        largest = max(largest, milli)
    levels: dict[int, int] = {}
    level, at = 0, 0
    for t in sorted(steps):
        if t > at:
            levels[level] = levels.get(level, 0) + t - at
        level += steps[t]
        at = t
    if period_us > at:
        levels[level] = levels.get(level, 0) + period_us - at
    pairs = tuple(sorted(levels.items()))
    return Use(
        period_us=period_us,
        peak_milli=max((lv for lv, us in pairs if us), default=0),
        active_us=sum(us for lv, us in pairs if lv > 0),
        levels=pairs,
        largest_milli=largest,
        gpu_units=sum(lv * us for lv, us in pairs),
        borrowed_units=sum((lv - reservation_milli) * us for lv, us in pairs if lv > reservation_milli),
        idle_units=sum((reservation_milli - lv) * us for lv, us in pairs if lv < reservation_milli),
    )


def budget_peak(intervals, windows) -> Decimal | None:
    """The budget hours used in the busiest of ``windows`` ((start_us, end_us) whole budget
    periods); ``intervals``: (start_us, end_us or None, milli-GPUs, milli time weight). None when
    there is no window."""
    if not windows:
        return None
    best = 0
    for w_start, w_end in windows:
        used = 0
        for start, end, milli, weight in intervals:
            end = w_end if end is None else min(end, w_end)
            start = max(start, w_start)
            if end > start:
                used += (end - start) * milli * weight
        best = max(best, used)
    return hours(best, BUDGET_UNITS_PER_HOUR)


def hours(units: int, per_hour: int = GPU_UNITS_PER_HOUR) -> Decimal:
    return (Decimal(units) / per_hour).quantize(HOURS_PLACES)


@dataclass(frozen=True)
class Figures:
    """What the advisor reads of one group over the recorded period."""

    name: str
    parent: str | None
    reservation_milli: int
    limit_milli: int
    use: Use
    guarantee_start_s: int = 120
    start_p95_s: float | None = None  # all its work
    reserved_start_p95_s: float | None = None  # work placed within the reservation
    budget_hours: Decimal | None = None
    budget_period: str = ""
    budget_peak_hours: Decimal | None = None
    min_limit_milli: int = 0


@dataclass(frozen=True)
class Proposal:
    name: str
    reservation_milli: int
    limit_milli: int
    budget_hours: int | None  # None: no budget proposed (kept as it is)
    budget_period: str = ""
    reasons: tuple[str, ...] = field(default=())


def _up(value: int, step: int) -> int:
    return -(-value // step) * step


def _idle_cover(use: Use, goals: Goals) -> int:
    """The largest whole-step reservation left idle at most the goal's share of the period."""
    step, pct, total = goals.gpu_step_milli, goals.idle_reserved_max_pct, use.period_us
    best, k = 0, 1
    while k * step <= use.peak_milli:
        r = k * step
        idle = sum((r - lv) * us for lv, us in use.levels if lv < r)
        if 100 * idle > pct * r * total:
            break
        best, k = r, k + 1
    return best


def wish(f: Figures, goals: Goals = GOALS) -> Proposal:
    """One group's proposal from its own figures, before the envelopes."""
    use, step = f.use, goals.gpu_step_milli
    waited = f.start_p95_s is not None and f.start_p95_s > f.guarantee_start_s
    if not use.gpu_units and not waited:
        return Proposal(f.name, f.reservation_milli, f.limit_milli, None, f.budget_period, ("no use: kept",))
    reservation = _idle_cover(use, goals)
    reasons = [f"idle reserved at most {goals.idle_reserved_max_pct} %"]
    if waited:
        reservation = max(reservation, _up(use.peak_milli, step))
        reasons.append(f"waited past the guarantee of {f.guarantee_start_s} s: its peak is reserved")
    if f.reserved_start_p95_s is not None and f.reserved_start_p95_s > f.guarantee_start_s:
        if f.reservation_milli > reservation:
            reservation = f.reservation_milli
            reasons.append("reserved work missed its guarantee: not lowered")
    demand = use.percentile_active(goals.limit_percentile) * (100 + goals.limit_headroom_pct)
    limit = max(reservation, _up(-(-demand // 100), step), _up(use.peak_milli, step), f.min_limit_milli)
    if not goals.lower_limits:
        limit = max(limit, f.limit_milli)
    budget = None
    if f.budget_hours is not None and f.budget_peak_hours is not None:
        wanted = f.budget_peak_hours * (100 + goals.budget_headroom_pct) / 100
        budget = _up(int(wanted.to_integral_value(ROUND_CEILING)), goals.budget_step_hours)
        reasons.append(f"budget: busiest {f.budget_period} + {goals.budget_headroom_pct} %")
    return Proposal(f.name, reservation, limit, budget, f.budget_period, tuple(reasons))


def fit(wishes: dict[str, int], total: int, step: int) -> dict[str, int]:
    """``wishes`` inside ``total``: as they are when they fit, else cut in proportion to whole
    steps, the steps left over going to the largest remainders (then by name)."""
    asked = sum(wishes.values())
    if asked <= total:
        return dict(wishes)
    shares, remainders = {}, []
    for name, w in wishes.items():
        steps, rest = divmod(w * total, asked * step)
        shares[name] = steps * step
        remainders.append((-rest, name))
    left = total - sum(shares.values())
    for _, name in sorted(remainders):
        if left < step:
            break
        shares[name] += step
        left -= step
    return shares


def propose(
    figures: list[Figures], capacity_milli: int, goals: Goals = GOALS, top_limit_milli: int | None = None
) -> dict[str, Proposal]:
    """Every group's proposal, inside its parent's envelope (top-level groups' reservations inside
    ``capacity_milli``, their limits at most ``top_limit_milli``, by default the same); in the
    order of ``figures``."""
    by = {f.name: f for f in figures}
    wishes = {f.name: wish(f, goals) for f in figures}
    children: dict[str | None, list[str]] = {}
    for f in figures:
        children.setdefault(f.parent if f.parent in by else None, []).append(f.name)

    def depth(name: str) -> int:
        return 0 if by[name].parent not in by else 1 + depth(by[name].parent)

    order = sorted(by, key=lambda n: (depth(n), n))
    for name in reversed(order):  # children first: a parent holds at least its children
        kids = [wishes[k] for k in children.get(name, ())]
        if not kids:
            continue
        p = wishes[name]
        reservation = max(p.reservation_milli, sum(k.reservation_milli for k in kids))
        limit = max(p.limit_milli, reservation, *(k.limit_milli for k in kids))
        budget = p.budget_hours
        if budget is not None:
            same = [
                k.budget_hours
                for k in kids
                if k.budget_hours is not None and k.budget_period == p.budget_period
            ]
            budget = max(budget, sum(same))
        wishes[name] = replace(p, reservation_milli=reservation, limit_milli=limit, budget_hours=budget)

    def share(parent: str | None, reservation: int, limit: int, budget: int | None, period: str) -> None:
        kids = children.get(parent, [])
        if not kids:
            return
        cut = fit({k: wishes[k].reservation_milli for k in kids}, reservation, goals.gpu_step_milli)
        same = [k for k in kids if wishes[k].budget_hours is not None and wishes[k].budget_period == period]
        cut_budget = {} if budget is None else fit({k: wishes[k].budget_hours for k in same}, budget, 1)
        for k in kids:
            w = wishes[k]
            wishes[k] = replace(
                w,
                reservation_milli=cut[k],
                limit_milli=max(min(w.limit_milli, limit), cut[k]),
                budget_hours=cut_budget.get(k, w.budget_hours),
                reasons=w.reasons
                + (("cut to fit the parent's envelope",) if _cut(w, cut[k], limit, cut_budget) else ()),
            )
            n = wishes[k]
            share(k, n.reservation_milli, n.limit_milli, n.budget_hours, n.budget_period)

    top_limit = capacity_milli if top_limit_milli is None else top_limit_milli
    share(None, capacity_milli, top_limit, None, "")
    return {f.name: wishes[f.name] for f in figures}


def _cut(w: Proposal, reservation: int, limit: int, budgets: dict) -> bool:
    return (
        reservation < w.reservation_milli
        or limit < w.limit_milli
        or budgets.get(w.name, w.budget_hours) != w.budget_hours
    )


def changes(figures: list[Figures], proposals: dict[str, Proposal]) -> dict:
    """The what-if changes (docs/whatif.md, "The changes") of the proposals that change something:
    reservations and limits in GPUs, a budget as its policy's one window."""
    out: dict[str, dict] = {"reservations": {}, "limits": {}, "budgets": {}}
    for f in figures:
        p = proposals[f.name]
        if p.reservation_milli != f.reservation_milli:
            out["reservations"][f.name] = _gpus(p.reservation_milli)
        if p.limit_milli != f.limit_milli:
            out["limits"][f.name] = _gpus(p.limit_milli)
        if p.budget_hours is not None and Decimal(p.budget_hours) != f.budget_hours:
            out["budgets"][f.name] = {"hours": p.budget_hours, "period": p.budget_period}
    return {kind: found for kind, found in out.items() if found}


def _gpus(milli: int) -> int | float:
    return milli // MILLI if milli % MILLI == 0 else float(Decimal(milli) / MILLI)
