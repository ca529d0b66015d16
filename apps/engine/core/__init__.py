"""The compute policy engine core: pure, deterministic, standard library only.

Integer units throughout: milli-GPUs (1 GPU = 1000), milli-weights (weight 1 = 1000) and budget
units (milli-weight x microsecond); money units (milli-GPU x micro-price x microsecond). See
docs/engine.md.
"""

from .allocator import allocate
from .budget import (
    MONEY_UNITS,
    UNITS_PER_HOUR,
    SpendInterval,
    UsageInterval,
    budget_used,
    burn_rate,
    charged_us,
    hours_to_units,
    money_to_units,
    money_used,
    period_bounds,
    price_to_rate,
    projected_run_out,
    units_to_hours,
    units_to_money,
)
from .decisions import Decisions, Placement, Preemption, Verdict
from .snapshot import (
    NOT_STARTED,
    Budget,
    ComputeResource,
    HeldTask,
    Maintenance,
    PlacedTask,
    Policy,
    Pool,
    Profile,
    Snapshot,
    SnapshotError,
    SpendCap,
    WaitingTask,
    validate,
)

__all__ = [
    "MONEY_UNITS",
    "NOT_STARTED",
    "UNITS_PER_HOUR",
    "Budget",
    "ComputeResource",
    "Decisions",
    "HeldTask",
    "Maintenance",
    "PlacedTask",
    "Placement",
    "Policy",
    "Pool",
    "Preemption",
    "Profile",
    "Snapshot",
    "SnapshotError",
    "SpendCap",
    "SpendInterval",
    "UsageInterval",
    "Verdict",
    "WaitingTask",
    "allocate",
    "budget_used",
    "burn_rate",
    "charged_us",
    "hours_to_units",
    "money_to_units",
    "money_used",
    "period_bounds",
    "price_to_rate",
    "projected_run_out",
    "units_to_hours",
    "units_to_money",
    "validate",
]
