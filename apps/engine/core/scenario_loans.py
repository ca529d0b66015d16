"""A scenario's dated quota loans (issue 35, rule 4), checked by path like any input.

`{"at": t, "loan": {"from": P, "to": Q, one of "reservation" | "limit" (GPUs) | "budget_hours"
(hours, with "period" when the lender has several windows), "until": t2}}`: at t the amount moves
from P to Q, at t2 (> t) back. Replayed in time order with the other changes (a loan's end comes
before the events at its time), both sides are checked at the start and, on the state replayed up
to t2, at the end: reservation and limit >= 0 and limit >= reservation, a limit within the
parent's and at least each child's, children's reservations within the parent's, the profiles of
the policy's compute resources within its limit, a budget window of the period on both and >= 0.
"""

from __future__ import annotations

import heapq

from .budget import units_to_hours
from .scenario_model import Loan, ScenarioError
from .scenario_values import gpus_text, read_gpus, read_hours, read_known, read_object, read_us

AMOUNTS = ("reservation", "limit", "budget_hours")


class LoanBook:
    """The policies' envelope as the replay stands (shared with `scenario_events`), and the loans
    not yet ended."""

    def __init__(self, policies, resources, profiles, reservation, limit, budgets):
        self.reservation, self.limit, self.budgets = reservation, limit, budgets
        self.parent = {p.name: p.parent for p in policies}
        self.children: dict[str, list[str]] = {p.name: [] for p in policies}
        for p in policies:
            if p.parent is not None:
                self.children[p.parent].append(p.name)
        self.sizes: dict[str, list[tuple[str, int]]] = {p.name: [] for p in policies}
        for r in resources.values():
            self.sizes[r.policy].append((r.profile, profiles[r.profile].size))
        self.open: list[tuple[int, int, Loan, str]] = []

    def start(self, body, field: str, at_us: int) -> Loan:
        o = read_object(body, field, ("from", "to", "until"), (*AMOUNTS, "period"))
        keys = [k for k in AMOUNTS if k in o]
        if len(keys) != 1:
            raise ScenarioError(f"{field}: needs exactly one of {', '.join(AMOUNTS)}")
        key = keys[0]
        lender = read_known(o["from"], f"{field}.from", self.limit, "policy")
        borrower = read_known(o["to"], f"{field}.to", self.limit, "policy")
        if lender == borrower:
            raise ScenarioError(f"{field}.to: policy {lender!r} cannot lend to itself")
        until = read_us(o["until"], f"{field}.until")
        if until <= at_us:
            raise ScenarioError(f"{field}.until: must be after the loan's start ({_s(at_us)} s)")
        period = None
        if key == "budget_hours":
            amount = read_hours(o[key], f"{field}.{key}")
            period = self._period(o.get("period"), field, lender, borrower)
        else:
            if "period" in o:
                raise ScenarioError(f"{field}.period: only a budget_hours loan names a period")
            amount = read_gpus(o[key], f"{field}.{key}")
        if amount <= 0:
            raise ScenarioError(f"{field}.{key}: must be > 0")
        loan = Loan(lender, borrower, key, amount, until, period)
        self._move(loan, +1)
        self._check(loan, field, "at its start")
        heapq.heappush(self.open, (until, len(self.open), loan, field))
        return loan

    def due(self, t_us: int | None = None) -> None:
        """End the loans due by t_us (all with None), each checked on the state it meets."""
        while self.open and (t_us is None or self.open[0][0] <= t_us):
            until, _, loan, field = heapq.heappop(self.open)
            self._move(loan, -1)
            self._check(loan, field, f"at its end ({_s(until)} s)")

    def _period(self, period, field: str, lender: str, borrower: str) -> str:
        mine = self.budgets[lender]
        if not mine:
            raise ScenarioError(f"{field}.from: policy {lender!r} has no budget to lend")
        if period is None:
            if len(mine) > 1:
                raise ScenarioError(
                    f"{field}.period: policy {lender!r} has several budget windows ({', '.join(mine)}); "
                    "name the one to lend from"
                )
            period = next(iter(mine))
        elif period not in mine:
            raise ScenarioError(f"{field}.period: policy {lender!r} has no {period!r} budget window")
        if period not in self.budgets[borrower]:
            raise ScenarioError(f"{field}.to: policy {borrower!r} has no {period!r} budget window")
        return period

    def _move(self, loan: Loan, sign: int) -> None:
        amount = loan.amount * sign
        if loan.key == "budget_hours":
            self.budgets[loan.lender][loan.period] -= amount
            self.budgets[loan.borrower][loan.period] += amount
        else:
            book = self.reservation if loan.key == "reservation" else self.limit
            book[loan.lender] -= amount
            book[loan.borrower] += amount

    def _check(self, loan: Loan, field: str, when: str) -> None:
        for name in (loan.lender, loan.borrower):
            broken = self._broken(name, loan)
            if broken:
                raise ScenarioError(f"{field}.{loan.key}: {when}, {broken}")

    def _broken(self, name: str, loan: Loan) -> str | None:
        res, lim = self.reservation, self.limit
        if loan.key == "budget_hours" and self.budgets[name][loan.period] < 0:
            left = units_to_hours(self.budgets[name][loan.period])
            return f"policy {name!r} would have a {loan.period} budget of {left} hours"
        if res[name] < 0 or lim[name] < 0:
            return f"policy {name!r} would have less than nothing ({loan.key} below 0 GPUs)"
        if lim[name] < res[name]:
            return (
                f"policy {name!r} would have a limit of {gpus_text(lim[name])} below its reservation of "
                f"{gpus_text(res[name])}"
            )
        up = self.parent[name]
        if up is not None:
            if lim[name] > lim[up]:
                return (
                    f"policy {name!r} would have a limit of {gpus_text(lim[name])} above the limit of its "
                    f"parent {up!r} ({gpus_text(lim[up])})"
                )
            total = sum(res[c] for c in self.children[up])
            if total > res[up]:
                return (
                    f"the reservations of {up!r}'s children would sum to {gpus_text(total)}, above its "
                    f"reservation of {gpus_text(res[up])}"
                )
        for c in self.children[name]:
            if lim[c] > lim[name]:
                return (
                    f"policy {name!r} would have a limit of {gpus_text(lim[name])} below the limit of its "
                    f"child {c!r} ({gpus_text(lim[c])})"
                )
        total = sum(res[c] for c in self.children[name])
        if self.children[name] and total > res[name]:
            return (
                f"the reservations of {name!r}'s children ({gpus_text(total)}) would be above its "
                f"reservation of {gpus_text(res[name])}"
            )
        for profile, size in self.sizes[name]:
            if size > lim[name]:
                return (
                    f"profile {profile!r} ({gpus_text(size)}) would be larger than the limit "
                    f"({gpus_text(lim[name])}) of policy {name!r}"
                )
        return None


def _s(us: int) -> str:
    whole, frac = divmod(us, 1_000_000)
    return str(whole) if not frac else str(us / 1_000_000)
