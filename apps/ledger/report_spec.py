"""What a usage report covers: its cuts (``DIMENSIONS``), its range on whole UTC hours or a calendar
period, its filters and whether it shows the unused capacity. The report itself is
``apps.ledger.selectors.usage_report``'s."""

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from apps.accounts.models import Group, Project, User
from apps.ledger.budgets import period_bounds
from apps.pools.models import GpuType, Pool
from apps.pricing.selectors import midnight

DIMENSIONS = {
    "group": "group_id",
    "project": "project_id",
    "user": "user_id",
    "gpu_type": "gpu_type_id",
    "pool": "pool_id",
}
PERIODS = ("day", "week", "month", "quarter", "custom")
IDLE_SEPARATE, IDLE_SPREAD = "separate", "spread"


def period_range(period: str, day: date) -> tuple[datetime, datetime]:
    """The UTC calendar period holding ``day``: a day, a week from Monday, a month, a quarter."""
    if period == "quarter":
        first = midnight(day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1))
        return first, (first + timedelta(days=93)).replace(day=1)
    return period_bounds(midnight(day), period)


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
