from rest_framework import serializers

from apps.core.fields import GpuAmountField
from apps.policies.models import ComputeResource


def gpus_field(**kwargs) -> serializers.DecimalField:
    return GpuAmountField(**kwargs)


def hours_field(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=14, decimal_places=3, **kwargs)


class GroupRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    slug = serializers.CharField()


class ComputeResourceSerializer(serializers.ModelSerializer):
    group = GroupRefSerializer(source="policy.group")
    profile = serializers.CharField(source="profile.name")
    gpus = gpus_field(
        source="profile.gpus", help_text="The profile's GPU size (the default if sized by task)."
    )
    size_from_task = serializers.BooleanField(source="profile.size_from_task")
    time_weight = serializers.DecimalField(source="profile.time_weight", max_digits=6, decimal_places=3)
    min_runtime_s = serializers.IntegerField(
        source="profile.min_runtime_s",
        help_text="Seconds a placed task is safe from reclaim (0: no minimum).",
    )
    sovereign_country = serializers.CharField(
        source="profile.sovereign_country",
        help_text="ISO 3166-1 alpha-2 code: the profile runs only on pools in that country; "
        "empty: not sovereign.",
    )
    min_gpu_memory_gb = serializers.IntegerField(
        source="profile.min_gpu_memory_gb",
        allow_null=True,
        help_text="The profile's pools have GPUs with at least this much memory (GB); null: no minimum.",
    )
    min_gpu_generation = serializers.IntegerField(
        source="profile.min_gpu_generation",
        allow_null=True,
        help_text="The profile's pools have GPUs of this generation or newer; null: any.",
    )
    reservation = gpus_field(source="policy.reservation")
    limit = gpus_field(source="policy.limit")
    max_preemptions_per_hour = serializers.IntegerField(
        source="policy.max_preemptions_per_hour",
        allow_null=True,
        help_text="Most of the group's tasks reclaim takes in any sliding hour; null: no cap.",
    )
    waiting = serializers.IntegerField(help_text="Tasks waiting in this compute resource now.")
    running = serializers.IntegerField(help_text="Tasks placed, running or stopping now.")

    class Meta:
        model = ComputeResource
        fields = [
            "id",
            "name",
            "group",
            "profile",
            "gpus",
            "size_from_task",
            "time_weight",
            "min_runtime_s",
            "sovereign_country",
            "min_gpu_memory_gb",
            "min_gpu_generation",
            "reservation",
            "limit",
            "max_preemptions_per_hour",
            "enabled",
            "waiting",
            "running",
        ]


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
    alert_threshold = serializers.IntegerField(help_text="Percent of the budget that raises an alert.")
    over_threshold = serializers.BooleanField()
    used_up = serializers.BooleanField()
    windows = BudgetWindowSerializer(
        many=True,
        help_text="Each time budget window (main first), all enforced at once; the fields above are "
        "those of the binding window (a used-up one, else the one with the fewest hours left).",
    )
