"""Leadership's and IT's pages: the estate at a glance, pools, passes and the engine."""

from django.contrib.auth.decorators import login_required
from django.utils import timezone

from apps.accounts.models import Group
from apps.ledger.budgets import budget_status
from apps.ledger.selectors import visible_groups
from apps.ledger.tables import UsageTable
from apps.policies.models import ResourcePolicy
from apps.pools.models import Pool
from apps.portal import charts, selectors
from apps.portal.filters import (
    BudgetFilter,
    EventFilter,
    PassFilter,
    PoolFilter,
    PoolKindFilter,
    QueueFilter,
    UsageFilter,
)
from apps.portal.tables import (
    CloudNodeTable,
    EventTable,
    PassTable,
    PolicyUseTable,
    PoolTable,
    QueueTable,
)
from apps.portal.views.common import allow, kept, render_page


@login_required
def leadership(request):
    allow(selectors.may_see_leadership(request.user), "Only leadership and IT see the leadership view.")
    now = timezone.now()
    history = selectors.estate_history(request.user, now=now)
    start, end = selectors.this_month(now)
    level = Group.Kind.BUSINESS_UNIT
    units = selectors.report(request.user, ("group",), start, end, level=level)
    cloud = selectors.pool_usage(kind=Pool.Kind.CLOUD)
    units_filter = UsageFilter(
        request.GET,
        groups=visible_groups(request.user).filter(kind=level).order_by("name"),
        levels=False,
        group_label="Business unit",
        prefix="u",
    )
    cloud_filter = PoolFilter(request.GET, queryset=Pool.objects.filter(kind=Pool.Kind.CLOUD), prefix="c")
    wanted = units_filter.spec()
    shown = selectors.report(request.user, ("group",), start, end, level=level, **wanted) if wanted else units
    days = [f"{day:%Y-%m-%d}" for day in history.days]
    unit_names = [row.labels["group"] for row in units.rows]
    context = {
        "units": UsageTable(shown, prefix="units-"),
        "cloud": PoolTable(kept(cloud, cloud_filter, lambda use: use.pool.pk), prefix="cloud-"),
        "units_filter": units_filter,
        "cloud_filter": cloud_filter,
        "month": start,
        "charts": [
            charts.bars(
                "use-by-unit",
                "GPU-hours per day by business unit",
                days,
                history.gpu_hours,
                y_title="GPU-hours",
                stacked=True,
            ),
            charts.bars(
                "spend-by-unit",
                f"GPU-hours and spend by business unit this month ({units.spec.currency})",
                unit_names,
                {
                    "GPU-hours": [row.figures.gpu_hours for row in units.rows],
                    f"cost ({units.spec.currency})": [row.figures.cost_amount for row in units.rows],
                },
            ),
            charts.bars(
                "cloud-in-use",
                "Cloud capacity in use now (GPUs)",
                [use.pool.name for use in cloud],
                {"declared": [use.pool.capacity for use in cloud], "in use": [use.in_use for use in cloud]},
                y_title="GPUs",
            ),
            charts.lines(
                "owned-utilisation",
                "Owned-GPU utilisation per day (% of declared capacity)",
                days,
                {"owned pools": history.owned_utilisation},
                y_title="%",
            ),
        ],
    }
    return render_page(
        request,
        "portal/leadership.html",
        context,
        [context["units"], context["cloud"]],
        [units_filter, cloud_filter],
    )


@login_required
def it(request):
    allow(selectors.may_see_it(request.user), "Only IT admins see the IT view.")
    pools = selectors.pool_usage()
    queues = QueueFilter(request.GET, queryset=selectors.queues(), prefix="q")
    statuses = budget_status()
    engine = selectors.engine_status()
    events = EventFilter(request.GET, queryset=selectors.events(), prefix="e")
    pool_filter = PoolKindFilter(request.GET, queryset=Pool.objects.all(), prefix="p")
    budget_filter = BudgetFilter(
        request.GET, queryset=ResourcePolicy.objects.filter(budget_hours__isnull=False), prefix="b"
    )
    pass_filter = PassFilter(request.GET, queryset=selectors.passes(), prefix="s")
    near = selectors.budgets_near_limit(statuses)
    waiting = [r for r in selectors.queues().order_by("-waiting_gpus", "name") if r.waiting][:15]
    recent = list(reversed(engine.recent))
    context = {
        "engine": engine,
        "queue_filter": queues,
        "event_filter": events,
        "pool_filter": pool_filter,
        "budget_filter": budget_filter,
        "pass_filter": pass_filter,
        "pools": PoolTable(kept(pools, pool_filter, lambda use: use.pool.pk)),
        "queues": QueueTable(queues.qs),
        "budgets": PolicyUseTable(
            kept(near, budget_filter, lambda row: row.policy.pk), prefix="budgets-", exclude=("waiting",)
        ),
        "passes": PassTable(pass_filter.qs),
        "events": EventTable(events.qs),
        "cloud_nodes": CloudNodeTable(selectors.cloud_nodes()),
        "charts": [
            charts.bars(
                "pool-capacity",
                "Capacity and use per pool (GPUs)",
                [use.pool.name for use in pools],
                {
                    "declared": [use.pool.capacity for use in pools],
                    "in use": [use.in_use for use in pools],
                    "borrowed": [use.borrowed for use in pools],
                },
                y_title="GPUs",
            ),
            charts.bars(
                "queue-waiting",
                "GPUs waiting per compute resource (longest queues)",
                [r.name for r in waiting],
                {"waiting": [r.waiting_gpus for r in waiting]},
                y_title="GPUs",
            ),
            charts.lines(
                "pass-duration",
                "Engine passes: duration (ms)",
                [p.started_at for p in recent],
                {"duration": [p.duration_ms for p in recent]},
                y_title="ms",
            ),
        ],
    }
    tables = [context[name] for name in ("pools", "queues", "budgets", "cloud_nodes", "passes", "events")]
    filters = [queues, events, pool_filter, budget_filter, pass_filter]
    return render_page(request, "portal/it.html", context, tables, filters)
