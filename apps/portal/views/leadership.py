"""Leadership's and IT's pages: the estate at a glance, cloud spend caps, pools, passes and the engine."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.accounts.models import Group
from apps.accounts.selectors import managed_group_ids
from apps.cloud import services as cloud
from apps.cloud.models import CloudSpendCap, CloudSpendCapChange
from apps.ledger.budgets import budget_status
from apps.ledger.tables import UsageTable
from apps.ledger.visibility import visible_groups
from apps.policies.models import ResourcePolicy
from apps.pools.models import Pool
from apps.portal import access, charts, guarantees, selectors, usage
from apps.portal.filters import (
    BudgetFilter,
    EventFilter,
    PassFilter,
    PoolFilter,
    PoolKindFilter,
    QueueFilter,
    UsageFilter,
)
from apps.portal.forms import CloudCapForm
from apps.portal.group_tables import CloudCapTable
from apps.portal.it_tables import (
    CloudNodeTable,
    EventTable,
    NeverFitsTable,
    PassTable,
    PolicyUseTable,
    PoolTable,
    QueueTable,
)
from apps.portal.views.common import allow, kept, render_page


@login_required
def leadership(request):
    return _leadership_page(request)


def _leadership_page(request, *, cap_form: CloudCapForm | None = None, status: int = 200):
    allow(access.may_see_leadership(request.user), "Only leadership and IT see the leadership view.")
    now = timezone.now()
    may_set_caps = access.may_set_cloud_caps(request.user)
    # Leadership of a business unit sees its unit's figures and caps, not the estate's cloud pools.
    managed = managed_group_ids(request.user)
    caps = [cap for cap in selectors.cloud_caps(now) if managed is None or cap.group_id in managed]
    if cap_form is None:
        cap_form = CloudCapForm()
        if managed is not None:
            cap_form.fields["group"].queryset = cap_form.fields["group"].queryset.filter(pk__in=managed)
    history = usage.estate_history(request.user, now=now)
    start, end = usage.this_month(now)
    level = Group.Kind.BUSINESS_UNIT
    units = usage.report(request.user, ("group",), start, end, level=level)
    cloud = selectors.pool_usage(kind=Pool.Kind.CLOUD) if managed is None else []
    units_filter = UsageFilter(
        request.GET,
        groups=visible_groups(request.user).filter(kind=level).order_by("name"),
        levels=False,
        group_label="Business unit",
        prefix="u",
    )
    cloud_filter = PoolFilter(request.GET, queryset=Pool.objects.filter(kind=Pool.Kind.CLOUD), prefix="c")
    wanted = units_filter.spec()
    shown = usage.report(request.user, ("group",), start, end, level=level, **wanted) if wanted else units
    days = [f"{day:%Y-%m-%d}" for day in history.days]
    unit_names = [row.labels["group"] for row in units.rows]
    context = {
        "caps": CloudCapTable(caps, exclude=() if may_set_caps else ("actions",)),
        "may_set_caps": may_set_caps,
        "cap_form": cap_form,
        "units": UsageTable(shown, prefix="units-"),
        "cloud": PoolTable(kept(cloud, cloud_filter, lambda use: use.pool.pk), prefix="cloud-"),
        "units_filter": units_filter,
        "cloud_filter": cloud_filter,
        "month": start,
        "guarantee_period": "this month",
        "guarantee_named": True,
        "guarantee_rows": guarantees.by_unit(
            visible_groups(request.user).filter(kind=level).order_by("name"), start, end
        ),
        "charts": [
            charts.bars(
                "use-by-unit",
                "GPU-hours per day by business unit",
                days,
                history.gpu_hours,
                y_title="GPU-hours",
                stacked=True,
                empty="No GPU-hours in these days yet.",
            ),
            charts.bars(
                "spend-by-unit",
                f"GPU-hours and spend by business unit this month ({units.spec.currency})",
                unit_names,
                {"GPU-hours": [row.figures.gpu_hours for row in units.rows]},
                y_title="GPU-hours",
                secondary={f"cost ({units.spec.currency})": [row.figures.cost_amount for row in units.rows]},
                y2_title=units.spec.currency,
                empty="No business unit has used GPUs this month.",
            ),
            charts.against(
                "cloud-in-use",
                "Cloud capacity in use now (GPUs)",
                [use.pool.name for use in cloud],
                {"in use": [use.in_use for use in cloud]},
                {"declared": [use.pool.capacity for use in cloud]},
                y_title="GPUs",
                empty="No cloud pool has capacity now.",
            ),
            charts.lines(
                "owned-utilisation",
                "Owned-GPU utilisation per day (% of declared capacity)",
                days,
                {"owned pools": history.owned_utilisation},
                y_title="%",
                empty="No owned-GPU use in these days yet.",
            ),
        ],
    }
    return render_page(
        request,
        "portal/leadership.html",
        context,
        [context["caps"], context["units"], context["cloud"]],
        [units_filter, cloud_filter],
        status=status,
    )


def _set_caps(request) -> None:
    allow(access.may_set_cloud_caps(request.user), "Only leadership sets cloud spend caps.")


@login_required
@require_POST
def set_cloud_cap(request):
    _set_caps(request)
    form = CloudCapForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            allow(
                access.may_set_cloud_cap_on(request.user, data["group"]),
                f"You may not set the cloud spend cap of {data['group']}.",
            )
            cap = cloud.set_cap(
                data["group"],
                data["amount"],
                data["currency"],
                actor=request.user,
                via=CloudSpendCapChange.Via.PORTAL,
            )
        except ValidationError as error:
            for field, errors in error.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"Cloud spend cap of {cap}.")
            return redirect("portal:leadership")
    return _leadership_page(request, cap_form=form, status=400)


@login_required
@require_POST
def remove_cloud_cap(request, pk: int):
    _set_caps(request)
    cap = get_object_or_404(CloudSpendCap.objects.select_related("group"), pk=pk)
    allow(access.may_set_cloud_cap_on(request.user, cap.group), f"You may not remove the cap of {cap.group}.")
    cloud.remove_cap(cap, actor=request.user, via=CloudSpendCapChange.Via.PORTAL)
    messages.success(request, f"{cap.group} has no cloud spend cap now.")
    return redirect("portal:leadership")


@login_required
def it(request):
    allow(access.may_see_it(request.user), "Only IT admins see the IT view.")
    pools = selectors.pool_usage()
    queues = QueueFilter(request.GET, queryset=selectors.queues(), prefix="q")
    statuses = budget_status(ResourcePolicy.objects.filter(budget_hours__isnull=False))  # all "near" reads
    engine = selectors.engine_status()
    events = EventFilter(request.GET, queryset=selectors.events(), prefix="e")
    pool_filter = PoolKindFilter(request.GET, queryset=Pool.objects.all(), prefix="p")
    budget_filter = BudgetFilter(
        request.GET, queryset=ResourcePolicy.objects.filter(budget_hours__isnull=False), prefix="b"
    )
    pass_filter = PassFilter(request.GET, queryset=selectors.passes(), prefix="s")
    near = selectors.budgets_near_limit(statuses)
    waiting = list(selectors.queues().filter(waiting__gt=0).order_by("-waiting_gpus", "name")[:15])
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
        "never_fits": NeverFitsTable(selectors.never_fits()),
        "charts": [
            charts.against(
                "pool-capacity",
                "Capacity and use per pool (GPUs)",
                [use.pool.name for use in pools],
                {"in use": [use.in_use for use in pools], "borrowed": [use.borrowed for use in pools]},
                {"declared": [use.pool.capacity for use in pools]},
                y_title="GPUs",
                empty="No pool has declared capacity.",
            ),
            charts.bars(
                "queue-waiting",
                "GPUs waiting per compute resource (longest queues)",
                [r.name for r in waiting],
                {"waiting": [r.waiting_gpus for r in waiting]},
                y_title="GPUs",
                empty="No GPUs are waiting: every compute resource's queue is empty.",
            ),
            charts.lines(
                "pass-duration",
                "Engine passes: duration (ms)",
                [p.started_at for p in recent],
                {"duration": [p.duration_ms for p in recent]},
                y_title="ms",
                empty="The engine has not run a pass yet.",
            ),
        ],
    }
    names = ("pools", "queues", "never_fits", "budgets", "cloud_nodes", "passes", "events")
    tables = [context[name] for name in names]
    filters = [queues, events, pool_filter, budget_filter, pass_filter]
    return render_page(request, "portal/it.html", context, tables, filters)
