"""Finance's page: usage and chargeback, priced, of the groups the viewer may see, and for the
estate's viewers what cloud nodes cost (``apps.cloud.selectors``: an estate-wide figure, idle
nodes included, so finance of a business unit sees its groups' usage and cost without it)."""

from django.contrib.auth.decorators import login_required

from apps.accounts.models import Group
from apps.accounts.selectors import sees_whole_estate
from apps.cloud import bills
from apps.cloud import selectors as cloud
from apps.cloud.tables import CloudGroupTable, CloudSpendTable
from apps.ledger.budgets import money_status
from apps.ledger.tables import UsageTable
from apps.ledger.visibility import visible_groups
from apps.policies.selectors import priced_policies
from apps.portal import access, charts, usage
from apps.portal.filters import (
    UsageFilter,
)
from apps.portal.views.common import allow, render_page
from apps.pricing.filters import PriceFilter
from apps.pricing.selectors import prices
from apps.pricing.tables import PriceTable


@login_required
def finance(request):
    allow(access.may_see_finance(request.user), "Only finance, leadership and IT see the finance view.")
    start, end = usage.this_month()
    groups = usage.report(request.user, ("group",), start, end)
    groups_filter = UsageFilter(request.GET, groups=visible_groups(request.user).order_by("name"), prefix="g")
    prices_filter = PriceFilter(request.GET, queryset=prices(), prefix="pr")
    wanted = groups_filter.spec()
    shown = usage.report(request.user, ("group",), start, end, **wanted) if wanted else groups
    by_type = usage.report(request.user, ("gpu_type",), start, end)
    units = [row for row in groups.rows if row.labels["group_kind"] == Group.Kind.BUSINESS_UNIT.label]
    currency = groups.spec.currency
    spend = cloud.spend(start, end, currency) if sees_whole_estate(request.user) else None
    budgeted = list(priced_policies().filter(group__in=visible_groups(request.user)).order_by("group__name"))
    money = money_status(budgeted)
    context = {
        "groups": UsageTable(shown, prefix="groups-"),
        "prices": PriceTable(prices_filter.qs, prefix="prices-", exclude=("actions",)),
        "spend": spend,
        "money_rows": [(p.group.name, window) for p in budgeted for window in money.get(p.pk, ())],
        "may_reconcile": bills.may_reconcile(request.user),
        "cloud": CloudSpendTable(spend, prefix="cloud-") if spend is not None else None,
        "cloud_groups": CloudGroupTable(spend, prefix="cloudgroups-") if spend is not None else None,
        "groups_filter": groups_filter,
        "prices_filter": prices_filter,
        "month": start,
        "currency": currency,
        "charts": [
            charts.bars(
                "cost-by-unit",
                f"Cost by business unit this month ({currency})",
                [row.labels["group"] for row in units],
                {"cost": [row.figures.cost_amount for row in units]},
                y_title=currency,
                empty=f"No cost in {currency} this month yet.",
            ),
            charts.bars(
                "cost-by-gpu-type",
                f"GPU-hours and cost by GPU type this month ({currency})",
                [row.labels["gpu_type"] for row in by_type.rows],
                {"GPU-hours": [row.figures.gpu_hours for row in by_type.rows]},
                y_title="GPU-hours",
                secondary={f"cost ({currency})": [row.figures.cost_amount for row in by_type.rows]},
                y2_title=currency,
                empty="No GPU-hours this month yet.",
            ),
        ],
    }
    return render_page(
        request,
        "portal/finance.html",
        context,
        [
            table
            for table in (context["groups"], context["prices"], context["cloud"], context["cloud_groups"])
            if table is not None
        ],
        [groups_filter, prices_filter],
    )
