from rest_framework import serializers

from apps.core.fields import GpuAmountField, PlainDecimalField, PlainIntegerField, StrictCharField
from apps.policies.models import ComputeResource, ResourcePolicy


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


def windows_field(**kwargs) -> serializers.DictField:
    return serializers.DictField(
        child=PlainDecimalField(max_digits=12, decimal_places=3, min_value=0),
        help_text="Further time budget windows besides the main one: {period: budget hours}, "
        "period day, week or month (UTC).",
        **kwargs,
    )


class SplitEnvelopeSerializer(serializers.Serializer):
    """The quota of one group in a split: the parent's envelope, or one unit directly below it."""

    group = serializers.CharField(source="group.slug", help_text="Group slug.")
    name = serializers.CharField(source="group.name")
    reservation = gpus_field()
    limit = gpus_field()
    budget_hours = hours_field(allow_null=True)
    budget_period = serializers.ChoiceField(
        choices=ResourcePolicy.Period.choices, allow_blank=True, help_text="Empty: no time budget."
    )
    windows = windows_field()


class SplitUnitSerializer(SplitEnvelopeSerializer):
    version = serializers.IntegerField(help_text="The row's version: send it back with a split.")


class SplitSerializer(SplitEnvelopeSerializer):
    """A group's quota (the envelope) and its split among the units directly below it."""

    units = SplitUnitSerializer(many=True)


class SplitUnitListSerializer(serializers.ListSerializer):
    """The units of a split, with the errors of each keyed by its group slug (else its position)."""

    def to_internal_value(self, data):
        if not isinstance(data, list):
            return super().to_internal_value(data)
        if not data:
            raise serializers.ValidationError("Name at least one unit.")
        rows, errors = [], {}
        for index, item in enumerate(data):
            slug = item.get("group") if isinstance(item, dict) else None
            key = slug if isinstance(slug, str) and slug else str(index)
            try:
                row = self.child.run_validation(item)
            except serializers.ValidationError as error:
                errors[key] = error.detail
                continue
            if any(row["group"] == other["group"] for other in rows):
                errors[key] = {"group": ["This unit is named twice."]}
            rows.append(row)
        if errors:
            raise serializers.ValidationError(errors)
        return rows


class SplitUnitInputSerializer(serializers.Serializer):
    """One unit's new quota; ``windows`` left out keeps its further windows as they are."""

    group = StrictCharField(help_text="Slug of a group directly below the split one.")
    reservation = GpuAmountField(min_value=0)
    limit = GpuAmountField(min_value=0)
    budget_hours = PlainDecimalField(max_digits=12, decimal_places=3, min_value=0, allow_null=True)
    budget_period = serializers.ChoiceField(
        choices=ResourcePolicy.Period.choices, allow_blank=True, help_text="Empty: no time budget."
    )
    windows = windows_field(required=False)
    version = PlainIntegerField(min_value=1, help_text="The row's version as last read.")

    class Meta:
        list_serializer_class = SplitUnitListSerializer

    def validate_windows(self, windows: dict) -> dict:
        periods = dict(ResourcePolicy.Period.choices)
        unknown = sorted(set(windows) - set(periods))
        if unknown:
            raise serializers.ValidationError(
                f"Unknown period {', '.join(unknown)}: use {', '.join(periods)}."
            )
        return windows


class SplitRequestSerializer(serializers.Serializer):
    units = SplitUnitInputSerializer(many=True)
