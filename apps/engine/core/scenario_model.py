"""The data model of a simulator scenario (DESIGN section 5), in exact integer units: milli-GPUs,
milli-weights, budget units and microseconds. `scenario.parse` builds it and raises ScenarioError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


class ScenarioError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class InstanceTypeSpec:
    """A cloud pool's machine: `gpus` per node in milli-GPUs (whole GPUs), at most `max` at once."""

    name: str
    gpus: int
    max: int
    spot: bool
    spot_available: bool


@dataclass(frozen=True, slots=True)
class CloudSpec:
    boot_us: int
    idle_timeout_us: int
    types: tuple[InstanceTypeSpec, ...]

    @property
    def maximum(self) -> int:
        return sum(t.gpus * t.max for t in self.types)

    @property
    def largest(self) -> int:
        return max(t.gpus for t in self.types)


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """A maintenance window, from `start_us` to `end_us` after the scenario's start."""

    start_us: int
    end_us: int
    note: str | None = None


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """`maintenance`: its windows in start order (given in any order, not overlapping)."""

    name: str
    capacity: int
    gpu_type: str | None
    cloud: CloudSpec | None = None
    maintenance: tuple[WindowSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class IdleLimitsSpec:
    """A session's idle limits in microseconds, None = off: stop this long after its start
    (`max_lifetime_us`), or after it has been not busy this long without a break (`idle_us`)."""

    max_lifetime_us: int | None = None
    idle_us: int | None = None


NO_LIMITS = IdleLimitsSpec()


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    name: str
    size: int
    time_weight: int
    pools: tuple[str, ...]
    size_from_task: bool
    idle_limits: IdleLimitsSpec = NO_LIMITS
    min_runtime_s: int = 0
    starvation_s: int | None = None
    default_time_limit_s: int | None = None
    max_time_limit_s: int | None = None
    unlimited_before_maintenance: bool = False


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """`budgets`: (period, budget units) per time budget window, in the order given; `money`:
    (period, money units, currency) per money window (`scenario_money`).
    `lending` ("priority" or "fair"), `over_quota_weight` (milli-weights) and `lendable` (milli-GPUs,
    None: all of the reservation) as the snapshot's Policy."""

    name: str
    parent: str | None
    reservation: int
    limit: int
    budgets: tuple[tuple[str, int], ...] = ()
    max_preemptions_per_hour: int | None = None
    lending: str = "priority"
    over_quota_weight: int = 1000
    lendable: int | None = None
    money: tuple[tuple[str, int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """`idle_limits`: the sessions' limits in force, each the resource's own or else its profile's;
    the time limits (seconds, None: none) likewise."""

    name: str
    policy: str
    profile: str
    idle_limits: IdleLimitsSpec = NO_LIMITS
    default_time_limit_s: int | None = None
    max_time_limit_s: int | None = None


@dataclass(frozen=True, slots=True)
class Submit:
    """`duration_us` None: a session that runs until stopped. `activity`: a session's
    (offset from its start, busy) entries, offsets increasing. `priority`: its place in its
    queue (higher first), kept when it is requeued. `time_limit_us`: the running time after which
    it ends timed out (resolved from the compute resource's default and maximum; None: none).
    `after_ok` / `after_any`: the task ids it runs after (an array's id stands for its tasks).
    `array`: the array it belongs to (its submit's id), `max_running` that array's cap."""

    id: str
    resource: str
    size: int
    duration_us: int | None
    checkpoint: bool
    kind: str = "batch"
    activity: tuple[tuple[int, bool], ...] = ()
    priority: int = 0
    time_limit_us: int | None = None
    after_ok: tuple[str, ...] = ()
    after_any: tuple[str, ...] = ()
    array: str | None = None
    max_running: int | None = None
    checkpoint_us: int | None = None  # it checkpoints every this much running time (lost work)


@dataclass(frozen=True, slots=True)
class Change:
    """cancel (target = task id), set_budget / set_capacity / set_reservation / set_limit
    (target = policy or pool, value in budget units or milli-GPUs), engine (value 1 = enable).
    `period`: the budget window a set_budget changes."""

    kind: str
    target: str | None
    value: int
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Loan:
    """A dated quota loan: `amount` of `key` ("reservation" or "limit", milli-GPUs; "budget_hours",
    budget units of the `period` window) moves from policy `lender` to `borrower` at the event's
    time and back at `until_us`."""

    lender: str
    borrower: str
    key: str
    amount: int
    until_us: int
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    at_us: int
    what: Submit | Change | Loan


@dataclass(frozen=True)
class Scenario:
    start: datetime
    duration_us: int
    step_us: int
    low_watermark_s: int
    pools: tuple[PoolSpec, ...]
    profiles: tuple[ProfileSpec, ...]
    policies: tuple[PolicySpec, ...]
    resources: tuple[ResourceSpec, ...]
    execution_order: dict[str, tuple[str, ...]]
    queuing_order: dict[str, tuple[str, ...]]
    events: tuple[Event, ...]
    prices: dict[str, dict[str, int]] = field(default_factory=dict)
