"""The quota split's request and answer shapes, and the fields the other API modules share: GPU
amounts, hours and a group's reference."""

from rest_framework import serializers

from apps.core.currency import currency_error
from apps.core.fields import GpuAmountField, PlainDecimalField, PlainIntegerField, StrictCharField
from apps.policies.models import ResourcePolicy


def gpus_field(**kwargs) -> serializers.DecimalField:
    return GpuAmountField(**kwargs)


def hours_field(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=14, decimal_places=3, **kwargs)


class GroupRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    slug = serializers.CharField()


def windows_field(**kwargs) -> serializers.DictField:
    return serializers.DictField(
        child=PlainDecimalField(max_digits=12, decimal_places=3, min_value=0),
        help_text="Further time budget windows besides the main one: {period: budget hours}, "
        "period day, week or month (UTC).",
        **kwargs,
    )


class MoneyWindowSerializer(serializers.Serializer):
    """A money budget window: ``amount`` per period in ``currency``."""

    amount = PlainDecimalField(max_digits=12, decimal_places=4, min_value=0)
    currency = StrictCharField(min_length=3, max_length=3, help_text="ISO 4217 code, e.g. EUR.")

    def validate_currency(self, value: str) -> str:
        if problem := currency_error(value):
            raise serializers.ValidationError(problem)
        return value.upper()


def money_windows_field(**kwargs) -> serializers.DictField:
    return serializers.DictField(
        child=MoneyWindowSerializer(),
        help_text='Money budget windows: {period: {"amount": "500", "currency": "EUR"}}, period day, '
        "week or month (UTC); the spend of the group's work at the effective prices counts against each.",
        **kwargs,
    )


def money_windows_out(windows: dict) -> dict:
    """{period: (amount, currency)} as the API shows it."""
    return {period: {"amount": amount, "currency": code} for period, (amount, code) in windows.items()}


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
    money_windows = money_windows_field()


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
    """One unit's new quota; ``windows`` (``money_windows``) left out keeps its further time (money)
    windows as they are."""

    group = StrictCharField(help_text="Slug of a group directly below the split one.")
    reservation = GpuAmountField(min_value=0)
    limit = GpuAmountField(min_value=0)
    budget_hours = PlainDecimalField(max_digits=12, decimal_places=3, min_value=0, allow_null=True)
    budget_period = serializers.ChoiceField(
        choices=ResourcePolicy.Period.choices, allow_blank=True, help_text="Empty: no time budget."
    )
    windows = windows_field(required=False)
    money_windows = money_windows_field(required=False)
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

    def validate_money_windows(self, windows: dict) -> dict:
        """{period: (amount, currency)}; left out keeps the unit's money windows, {} removes them."""
        self.validate_windows(windows)
        return {period: (row["amount"], row["currency"]) for period, row in windows.items()}


class SplitRequestSerializer(serializers.Serializer):
    units = SplitUnitInputSerializer(many=True)
