"""The compute policy engine core: pure, deterministic, standard library only.

Integer units throughout: milli-GPUs (1 GPU = 1000), milli-weights (weight 1 = 1000) and budget
units (milli-weight x microsecond). See docs/engine.md.
"""

from .allocator import allocate
from .budget import (
    UNITS_PER_HOUR,
    UsageInterval,
    budget_used,
    burn_rate,
    charged_us,
    hours_to_units,
    period_bounds,
    projected_run_out,
    units_to_hours,
)
from .decisions import Decisions, Placement, Preemption, Verdict
from .snapshot import (
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
    "UsageInterval",
    "Verdict",
    "WaitingTask",
    "allocate",
    "budget_used",
    "burn_rate",
    "charged_us",
    "hours_to_units",
    "period_bounds",
    "projected_run_out",
    "units_to_hours",
    "validate",
]
