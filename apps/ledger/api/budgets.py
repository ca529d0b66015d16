"""``/api/v1/usage/``: the use, time budget and money budget of each policy you may see, as
``budget_status`` and ``money_status`` read them from the usage intervals."""

from dataclasses import asdict

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.response import Response

from apps.ledger.budgets import budget_status, money_status
from apps.policies import selectors
from apps.policies.api.serializers import GroupRefSerializer, gpus_field, hours_field
from apps.policies.models import ResourcePolicy

RUNS_OUT_HELP = (
    "Whether the budget runs out before its reset at the current burn rate (a projected run-out at or "
    "after the reset is no run-out)."
)
RUN_OUT_HELP = (
    'The run-out in the portal\'s words: "projected to run out at ...", "lasts until reset ...", '
    '"not burning now", "used up; resets ..." or "no budget".'
)


def _run_out(status) -> dict:
    return {
        "over_threshold": status.over_threshold,
        "runs_out_in_period": status.runs_out_in_period,
        "run_out": status.run_out_text(),
    }


class BudgetWindowSerializer(serializers.Serializer):
    """One time budget window of a policy, on its own UTC calendar period."""

    period = serializers.CharField(help_text="day, week or month (UTC).")
    period_start = serializers.DateTimeField()
    resets_at = serializers.DateTimeField()
    budget_hours = hours_field()
    used_hours = hours_field()
    left_hours = hours_field()
    burn_rate = hours_field(help_text="Budget hours spent per hour at the current rate.")
    projected_run_out = serializers.DateTimeField(allow_null=True)
    runs_out_in_period = serializers.BooleanField(help_text=RUNS_OUT_HELP)
    run_out = serializers.CharField(help_text=RUN_OUT_HELP)
    over_threshold = serializers.BooleanField()
    used_up = serializers.BooleanField()


class MoneyWindowStatusSerializer(serializers.Serializer):
    """One money budget window of a policy: its spend at the effective prices in its period."""

    period = serializers.CharField(help_text="day, week or month (UTC).")
    currency = serializers.CharField(help_text="ISO 4217 code of every amount of the window.")
    period_start = serializers.DateTimeField()
    resets_at = serializers.DateTimeField()
    amount = serializers.DecimalField(max_digits=12, decimal_places=4, help_text="The budget per period.")
    spent = serializers.DecimalField(max_digits=16, decimal_places=2, help_text="Spent in the period so far.")
    left = serializers.DecimalField(max_digits=16, decimal_places=2)
    burn_rate = serializers.DecimalField(
        max_digits=16,
        decimal_places=4,
        help_text="Spent per hour by the running work at today's prices.",
    )
    projected_run_out = serializers.DateTimeField(allow_null=True)
    runs_out_in_period = serializers.BooleanField(help_text=RUNS_OUT_HELP)
    run_out = serializers.CharField(help_text=RUN_OUT_HELP)
    over_threshold = serializers.BooleanField()
    used_up = serializers.BooleanField()


class UsageSerializer(serializers.Serializer):
    """A policy's use now and in its period: a ``BudgetStatus`` with the policy's group and sizes."""

    policy_id = serializers.IntegerField()
    group = GroupRefSerializer()
    reservation = gpus_field()
    limit = gpus_field()
    gpus_in_use = gpus_field()
    gpu_hours = hours_field(help_text="GPU-hours in the current period (the month without a budget).")
    has_budget = serializers.BooleanField()
    period = serializers.CharField(allow_null=True, help_text="day, week or month (UTC); null if no budget.")
    period_start = serializers.DateTimeField()
    resets_at = serializers.DateTimeField()
    budget_hours = hours_field(allow_null=True)
    used_hours = hours_field()
    left_hours = hours_field(allow_null=True)
    burn_rate = hours_field(help_text="Budget hours spent per hour at the current rate.")
    projected_run_out = serializers.DateTimeField(allow_null=True)
    runs_out_in_period = serializers.BooleanField(help_text=RUNS_OUT_HELP)
    run_out = serializers.CharField(help_text=RUN_OUT_HELP)
    alert_threshold = serializers.IntegerField(help_text="Percent of the budget that raises an alert.")
    over_threshold = serializers.BooleanField()
    used_up = serializers.BooleanField()
    windows = BudgetWindowSerializer(
        many=True,
        help_text="Each time budget window (main first), all enforced at once; the fields above are "
        "those of the binding window (a used-up one, else the one with the fewest hours left).",
    )
    money_windows = MoneyWindowStatusSerializer(
        many=True, help_text="Each money budget window, shortest period first, enforced beside the time ones."
    )


class UsageFilter(filters.FilterSet):
    group = filters.CharFilter(field_name="group__slug", help_text="Group slug.")

    class Meta:
        model = ResourcePolicy
        fields = ["group"]


class UsageView(generics.GenericAPIView):
    """Use and time budget of each policy of your groups (and of the groups you manage): GPUs in
    use, GPU-hours, budget hours used and left, burn rate, projected run-out and reset time."""

    queryset = ResourcePolicy.objects.none()
    serializer_class = UsageSerializer
    filterset_class = UsageFilter
    pagination_class = None

    def get_queryset(self):
        return selectors.visible_policies(self.request.user).order_by("group__name")

    @extend_schema(responses=UsageSerializer(many=True))
    def get(self, request):
        policies = list(self.filter_queryset(self.get_queryset()))
        statuses = budget_status(policies)
        money = money_status(policies)
        rows = [
            {
                **asdict(statuses[p.pk]),
                "group": p.group,
                "reservation": p.reservation,
                "limit": p.limit,
                **_run_out(statuses[p.pk]),
                "windows": [{**asdict(window), **_run_out(window)} for window in statuses[p.pk].windows],
                "money_windows": [
                    {**asdict(window), **_run_out(window), "used_up": window.used_up}
                    for window in money.get(p.pk, ())
                ],
            }
            for p in policies
        ]
        return Response(UsageSerializer(rows, many=True).data)
