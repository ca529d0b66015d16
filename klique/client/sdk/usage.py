"""Usage and budgets in the SDK: per policy of the user's groups, the GPUs in use, the GPU-hours,
each time budget window (used, left, burn rate, run-out, reset) and each money budget window
(spent, left, burn rate in its currency, run-out, reset)."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from klique.client.sdk.records import build


@dataclass(frozen=True)
class BudgetWindow:
    """One time budget window of a policy (e.g. its budget per day), on its own UTC period."""

    period: str
    period_start: datetime
    resets_at: datetime
    budget_hours: Decimal
    used_hours: Decimal
    left_hours: Decimal
    burn_rate: Decimal
    projected_run_out: datetime | None
    over_threshold: bool
    used_up: bool
    run_out: str = ""  # the run-out in the portal's words ("lasts until reset ..."); "" from older servers
    runs_out_in_period: bool = False


@dataclass(frozen=True)
class MoneyWindow:
    """One money budget window of a policy: its spend at the effective prices in its UTC period."""

    period: str
    currency: str
    period_start: datetime
    resets_at: datetime
    amount: Decimal
    spent: Decimal
    left: Decimal
    burn_rate: Decimal
    projected_run_out: datetime | None
    over_threshold: bool
    used_up: bool
    run_out: str = ""
    runs_out_in_period: bool = False


@dataclass(frozen=True)
class Usage:
    """A policy of one of the user's groups: GPUs in use and its time budget in the period (the
    binding window's figures; ``windows`` has each window)."""

    policy_id: int
    group: str
    group_name: str
    reservation: Decimal
    limit: Decimal
    gpus_in_use: Decimal
    gpu_hours: Decimal
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
    over_threshold: bool
    used_up: bool
    windows: tuple[BudgetWindow, ...] = ()
    run_out: str = ""
    runs_out_in_period: bool = False
    money_windows: tuple[MoneyWindow, ...] = ()

    @classmethod
    def from_api(cls, data: dict) -> "Usage":
        group = data["group"]
        windows = tuple(build(BudgetWindow, w) for w in data.get("windows") or ())
        money = tuple(build(MoneyWindow, w) for w in data.get("money_windows") or ())
        return build(
            cls,
            {**data, "group": group["slug"], "group_name": group["name"]},
            windows=windows,
            money_windows=money,
        )


class UsageApi:
    """The usage endpoint of ``Client`` (``usage/``)."""

    def usage(self) -> list[Usage]:
        """GPUs in use, GPU-hours and the time budget of each policy of your groups."""
        return [Usage.from_api(u) for u in self._request("GET", "usage/")]
