"""Monthly statements per group (business unit, department, team): GPU-hours, budget hours and cost
by GPU type and project, the adjustments booked in the month, optionally the unused capacity, the
totals, the period and the price list used. As CSV, and as PDF rendered by WeasyPrint from an HTML
template (``templates/ledger/statement.html``).

A statement is a usage report (``selectors.usage_report``) of the group's subtree by GPU type then
project, so it counts exactly what the viewer may see, reads a closed month's frozen figures and
uses the same access rule (``visibility.refusal``)."""

import csv
import io
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.template.loader import render_to_string
from django.utils import timezone

from apps.accounts.models import Group
from apps.accounts.selectors import cost_centres, group_labels
from apps.core.exports import spreadsheet_safe
from apps.core.numbers import hours
from apps.ledger import closed
from apps.ledger.lost_credit import LostCredit, lost_credit
from apps.ledger.models import MonthClose
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import Report, report_filter, usage_report
from apps.ledger.visibility import scope, visible
from apps.pools.models import GpuType
from apps.pricing.selectors import Segment, price_segments
from klique import numbers

STATEMENT_KINDS = (Group.Kind.BUSINESS_UNIT, Group.Kind.DEPARTMENT, Group.Kind.TEAM)


@dataclass(frozen=True)
class PriceLine:
    gpu_type: str
    per_gpu_hour: Decimal | None
    start: datetime
    end: datetime


@dataclass
class Statement:
    group: Group
    path: str
    cost_centre: str
    month: date
    report: Report
    close: MonthClose | None
    prices: list[PriceLine]
    scope: str
    made_at: datetime
    lost_credit: LostCredit | None = None  # where a policy credits lost work (``lost_credit``)

    @property
    def total_after_credit(self) -> Decimal:
        """The total cost less the credit for lost work (never below 0: the credit is capped)."""
        total = self.report.total.cost_amount
        return total - self.lost_credit.amount if self.lost_credit else total

    @property
    def start(self) -> datetime:
        return self.report.spec.start

    @property
    def end(self) -> datetime:
        return self.report.spec.end

    @property
    def currency(self) -> str:
        return self.report.spec.currency

    def filename(self, extension: str) -> str:
        return f"statement-{self.group.slug}-{self.month:%Y-%m}-{self.currency}.{extension}"


def statement_spec(group: Group, month: date, currency: str, idle: str = "") -> ReportSpec:
    start, end = closed.month_bounds(month)
    return ReportSpec(
        dims=("gpu_type", "project"), start=start, end=end, currency=currency, group=group, idle=idle
    )


def statement(viewer, spec: ReportSpec, now: datetime | None = None) -> Statement:
    """The statement of ``spec`` (from ``statement_spec``); the caller has checked
    ``visibility.refusal``."""
    now = now or timezone.now()
    month = spec.start.date()
    close = (
        MonthClose.objects.filter(month=month, reopened_at__isnull=True).select_related("closed_by").first()
    )
    segments = closed.frozen_segments(close, spec.currency) if close else None
    if segments is None:
        segments = price_segments(spec.currency, spec.start, spec.end)
    names = dict(GpuType.objects.values_list("pk", "name"))
    prices = [
        PriceLine(names.get(s.gpu_type_id, "?"), s.per_gpu_hour, s.start, s.end)
        for s in sorted(segments, key=_by_name(names))
        if s.per_gpu_hour is not None
    ]
    report = usage_report(viewer, spec, now=now)
    return Statement(
        group=spec.group,
        path=group_labels([spec.group.pk])[spec.group.pk][1],
        cost_centre=cost_centres().get(spec.group.pk, ""),
        month=month,
        report=report,
        close=close,
        prices=prices,
        scope=scope(viewer),
        made_at=now,
        lost_credit=lost_credit(
            spec.group,
            spec.start,
            spec.end,
            segments,
            report.total.cost,
            where=visible(viewer) & report_filter(spec),
        ),
    )


def _by_name(names: dict[int, str]):
    def key(segment: Segment):
        return names.get(segment.gpu_type_id, ""), segment.start

    return key


def state(statement: Statement) -> str:
    if statement.close is None:
        return "Open: priced at today's price list; the figures may change until the month is closed."
    who = statement.close.closed_by.username if statement.close.closed_by else "system"
    return f"Closed on {statement.close.closed_at:%Y-%m-%d %H:%M} UTC by {who}: the figures are frozen."


def csv_text(statement: Statement) -> str:
    """A header block (key, value), a blank line, the usage lines with the total lines, a blank
    line and the adjustment lines."""
    report = statement.report
    buffer = io.StringIO()
    out = csv.writer(buffer)
    out.writerows(
        [
            ["Statement", statement.group.name],
            ["Group", statement.path],
            ["Kind", statement.group.get_kind_display()],
            ["Cost centre", statement.cost_centre],
            ["Period from (UTC)", f"{statement.start:%Y-%m-%d %H:%M}"],
            ["Period until (UTC, not included)", f"{statement.end:%Y-%m-%d %H:%M}"],
            ["Currency", statement.currency],
            ["State", state(statement)],
            ["Counts", statement.scope],
            [
                "Price list used",
                "; ".join(
                    f"{p.gpu_type} {p.per_gpu_hour} from {p.start:%Y-%m-%d} until {p.end:%Y-%m-%d}"
                    for p in statement.prices
                ),
            ],
            [],
        ]
    )
    columns = report.columns()
    out.writerow([title for _, title, _ in columns])
    for record in [*report.records(), *report.summary_records()]:
        out.writerow(["" if record[key] is None else spreadsheet_safe(record[key]) for key, _, _ in columns])
    if report.adjustments:
        out.writerows([[], ADJUSTMENT_COLUMNS])
        out.writerows(adjustment_rows(report))
    credit = statement.lost_credit
    if credit is not None:
        out.writerows(
            [
                [],
                [
                    "Credit for lost work",
                    "Lost GPU-hours",
                    "Not priced (GPU-hours)",
                    "Credit",
                    "Total after credit",
                ],
                ["", credit.gpu_hours, credit.unpriced_hours, -credit.amount, statement.total_after_credit],
            ]
        )
    return buffer.getvalue()


ADJUSTMENT_COLUMNS = [
    "Closed month",
    "Group",
    "Project",
    "GPU type",
    "GPU-hours",
    "Budget hours",
    "Cost",
    "Reason",
    "By",
    "At (UTC)",
]


def adjustment_rows(report: Report) -> list[list]:
    return [
        [
            f"{a.closed_month:%Y-%m}",
            spreadsheet_safe(a.group.name),
            spreadsheet_safe(a.project.name if a.project else "(no project)"),
            a.gpu_type.name,
            hours(a.gpu_us),
            hours(a.budget_us),
            a.cost,
            spreadsheet_safe(a.reason),
            a.actor.username if a.actor else "system",
            f"{a.at:%Y-%m-%d %H:%M}",
        ]
        for a in report.adjustments
    ]


def _shown(value, kind: str, currency: str) -> str:
    """A cell as a person reads it (``klique.numbers``); the CSV keeps full precision."""
    if value is None or value == "":
        return ""
    if kind == "hours":
        return numbers.hours(value)
    if kind == "money":
        return numbers.money(value, currency)
    if kind == "percent":
        return f"{value} %"
    return str(value)


def _credit_shown(statement: Statement) -> dict | None:
    credit, currency = statement.lost_credit, statement.currency
    if credit is None:
        return None
    return {
        "hours": numbers.hours(credit.gpu_hours),
        "unpriced": numbers.hours(credit.unpriced_hours),
        "amount": numbers.money(-credit.amount, currency),
        "total": numbers.money(statement.total_after_credit, currency),
    }


def pdf_bytes(statement: Statement) -> bytes:
    from weasyprint import HTML

    report, currency = statement.report, statement.currency
    columns = report.columns()

    def lines(records):
        return [
            [(_shown(record[key], kind, currency), kind) for key, _, kind in columns] for record in records
        ]

    html = render_to_string(
        "ledger/statement.html",
        {
            "statement": statement,
            "state": state(statement),
            "columns": columns,
            "lines": lines(report.records()),
            "summary": lines(report.summary_records()),
            "prices": [(p, numbers.price(p.per_gpu_hour, currency)) for p in statement.prices],
            "credit": _credit_shown(statement),
            "adjustment_columns": ADJUSTMENT_COLUMNS,
            "adjustments": [
                [
                    *row[:4],
                    numbers.hours(row[4]),
                    numbers.hours(row[5]),
                    numbers.money(row[6], currency),
                    *row[7:],
                ]
                for row in adjustment_rows(report)
            ],
        },
    )
    return HTML(string=html).write_pdf()
