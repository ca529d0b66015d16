"""Dated quota loans in the SDK: GPUs of reservation or limit, or budget hours, lent by one group
to another until a date and given back automatically then (docs/governance.md, "Dated quota
loans"). Whoever may lend between the two groups lends at once; anyone else asks with a change
request of kind ``loan``."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from klique.client.sdk.maintenance import instant
from klique.client.sdk.records import build

WHAT = ("reservation", "limit", "budget_hours")


@dataclass(frozen=True)
class Loan:
    """A loan of ``amount`` of the lender's ``what`` (``text`` says it: "8 GPUs of reservation")
    until ``ends_at``; ``state`` active or ended. ``revert_error``: why the give-back was refused
    (it is tried again at each engine pass)."""

    id: int
    lender: str
    borrower: str
    what: str
    amount: Decimal
    period: str
    text: str
    starts_at: datetime
    ends_at: datetime
    state: str
    ended_at: datetime | None
    note: str
    via: str
    created_by: str | None
    revert_error: str

    @classmethod
    def from_api(cls, data: dict) -> "Loan":
        return build(cls, data)


@dataclass(frozen=True)
class ChangeRequest:
    """A change request as filed: ``state`` pending until the ``approver_role`` of the
    ``approver_group`` decides it. For a loan: the ``lender``, one of ``reservation``, ``limit`` or
    ``budget_hours`` and ``loan_until``."""

    id: int
    group: str
    kind: str
    reservation: Decimal | None
    limit: Decimal | None
    budget_hours: Decimal | None
    budget_period: str
    lender: str | None
    loan_until: datetime | None
    justification: str
    state: str
    requester: str | None
    approver_role: str
    approver_group: str | None
    created_at: datetime

    @classmethod
    def from_api(cls, data: dict) -> "ChangeRequest":
        return build(cls, data)


def _what(what: str) -> str:
    if what not in WHAT:
        raise ValueError(f"what: choose one of {', '.join(WHAT)}, not {what!r}")
    return what


class LoansApi:
    """The loan endpoints of ``Client`` (``loans/``, and ``change-requests/`` to ask for one)."""

    def loans(self, state: str | None = None, *, what: str | None = None) -> list[Loan]:
        """The loans of the groups you belong to or see, newest first; ``state``: active or ended."""
        params = {k: v for k, v in (("state", state), ("what", what)) if v}
        return [Loan.from_api(row) for row in self._all_pages("loans/", params or None)]

    def loan(self, loan_id: int) -> Loan:
        return Loan.from_api(self._request("GET", f"loans/{int(loan_id)}/"))

    def lend(
        self,
        lender: str,
        borrower: str,
        what: str,
        amount: Decimal | str | int,
        until: datetime | timedelta | str,
        period: str | None = None,
        note: str = "",
    ) -> Loan:
        """Lend ``amount`` of the ``lender``'s ``what`` (reservation, limit or budget_hours; a
        ``period`` picks the budget window) to ``borrower`` (group slugs) until ``until`` (a
        ``timedelta`` counts from now). Applied at once; ``PermissionDenied`` when you may not lend
        between them (``ask_loan``), ``InvalidRequest`` naming the field when a side would break
        its envelope at the start or at the end."""
        body = {
            "lender": lender,
            "borrower": borrower,
            "what": _what(what),
            "amount": str(amount),
            "until": instant(until),
            "period": period or "",
            "note": note,
        }
        return Loan.from_api(self._request("POST", "loans/", json=body))

    def give_back(self, loan_id: int) -> Loan:
        """Give a loan back now (whoever may lend between the two groups)."""
        return Loan.from_api(self._request("POST", f"loans/{int(loan_id)}/give-back/"))

    def ask_loan(
        self,
        group: str,
        lender: str,
        what: str,
        amount: Decimal | str | int,
        until: datetime | timedelta | str,
        justification: str,
        period: str | None = None,
    ) -> ChangeRequest:
        """Ask for a loan to ``group`` (yours) from ``lender``: a pending change request that the
        owner of the nearest group above both approves (it lends then) or denies."""
        body = {
            "group": group,
            "kind": "loan",
            "lender": lender,
            _what(what): str(amount),
            "budget_period": period or "",
            "loan_until": instant(until),
            "justification": justification,
        }
        return ChangeRequest.from_api(self._request("POST", "change-requests/", json=body))
