"""The per-cost-centre cut of a month for ERP import: one line per cost centre, GPU type and kind
of line (usage, adjustment), from the usage of each group itself (never its subtree, so no
figure is counted twice), with each group's cost centre (``apps.accounts.selectors.cost_centres``).

Column names are stable (``docs/ledger.md``, "Cost centres"); numbers are plain decimals with a
point, hours to 3 places and amounts to 2."""

import csv
import io
from collections import defaultdict
from datetime import date
from fractions import Fraction

from apps.accounts.selectors import cost_centres
from apps.core.numbers import hours, money
from apps.ledger import closed
from apps.ledger.report_spec import ReportSpec
from apps.ledger.rollups import built_until
from apps.ledger.usage import MONEY_DENOMINATOR, PRICE_SCALE
from apps.ledger.visibility import visible
from apps.pools.models import GpuType

COLUMNS = [
    "period_start",
    "period_end",
    "month_state",
    "cost_centre",
    "gpu_type",
    "line",
    "gpu_hours",
    "budget_hours",
    "amount",
    "currency",
]


def month_spec(month: date, currency: str) -> ReportSpec:
    start, end = closed.month_bounds(month)
    return ReportSpec(dims=("group",), start=start, end=end, currency=currency)


def lines(viewer, spec: ReportSpec) -> list[dict]:
    """The ERP lines of the month ``spec`` covers, of the usage the viewer may see."""
    from django.utils import timezone

    stop = max(spec.start, min(spec.end, timezone.now()))
    segments = closed.report_segments(spec.currency, spec.start, stop)
    sums = closed.usage_by(
        ["group_id", "gpu_type_id"], visible(viewer), spec.start, stop, segments, built_until(), spec.currency
    )
    centres = cost_centres()
    names = dict(GpuType.objects.values_list("pk", "name"))
    found: dict[tuple, list] = defaultdict(lambda: [0, 0, Fraction(0)])
    for ((group_id, gpu_type_id), i), (gpu, budget) in sums.items():
        price = segments[i].per_gpu_hour if i >= 0 else None
        entry = found[(centres.get(group_id, ""), names.get(gpu_type_id, ""), "usage")]
        entry[0] += gpu
        entry[1] += budget
        if price is not None:
            entry[2] += Fraction(gpu * int(price * PRICE_SCALE), MONEY_DENOMINATOR)
    for adjustment in closed.adjustments(viewer, spec):
        entry = found[(centres.get(adjustment.group_id, ""), adjustment.gpu_type.name, "adjustment")]
        entry[0] += adjustment.gpu_us
        entry[1] += adjustment.budget_us
        entry[2] += closed.adjustment_cost(adjustment)
    state = "closed" if spec.start.date() in closed.closed_months() else "open"
    return [
        {
            "period_start": spec.start.date().isoformat(),
            "period_end": spec.end.date().isoformat(),
            "month_state": state,
            "cost_centre": centre,
            "gpu_type": gpu_type,
            "line": line,
            "gpu_hours": hours(gpu),
            "budget_hours": hours(budget),
            "amount": money(cost),
            "currency": spec.currency,
        }
        for (centre, gpu_type, line), (gpu, budget, cost) in sorted(found.items())
    ]


def csv_text(rows: list[dict]) -> str:
    from apps.core.exports import spreadsheet_safe

    buffer = io.StringIO()
    out = csv.DictWriter(buffer, fieldnames=COLUMNS)
    out.writeheader()
    for row in rows:
        out.writerow({key: spreadsheet_safe(value) for key, value in row.items()})
    return buffer.getvalue()
