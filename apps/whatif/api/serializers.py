"""What-if runs over the API (docs/whatif.md, "Runs: API, CLI and SDK")."""

from datetime import UTC

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.fields import PlainIntegerField, StrictCharField
from apps.whatif import selectors
from apps.whatif.models import WhatIfRun

NO_OFFSET = "Give the time with its UTC offset, e.g. 2026-03-02T00:00:00Z."
MAX_WAIT_THRESHOLD_S = 2_147_483_647  # the column's largest value


class InstantField(serializers.DateTimeField):
    """An ISO 8601 instant with its offset (``Z`` or ``+00:00``), read as UTC; a time without an
    offset is refused rather than read in the server's time zone."""

    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("invalid", format="YYYY-MM-DDThh:mm[:ss[.uuuuuu]]Z")
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            parsed = None
        if parsed is None:
            self.fail("invalid", format="YYYY-MM-DDThh:mm[:ss[.uuuuuu]]Z")
        if parsed.tzinfo is None:
            raise serializers.ValidationError(NO_OFFSET)
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise serializers.ValidationError("Enter a time between the years 1 and 9999 in UTC.") from None


class StartRunSerializer(serializers.Serializer):
    """A run to start: the recorded period [start, end), its scope and IT's changes."""

    start = InstantField(help_text="Start of the recorded period (inclusive), ISO 8601 with its offset.")
    end = InstantField(
        help_text="End of the recorded period (exclusive), ISO 8601 with its offset; not in the future."
    )
    groups = serializers.ListField(
        child=StrictCharField(max_length=100),
        default=list,
        max_length=200,
        help_text="Group slugs of the scope (their subtrees); empty: the whole estate.",
    )
    changes = serializers.DictField(
        default=dict,
        help_text="IT's changes, by kind: reservations, limits, budgets, time_weights, pool_order, "
        'capacities, lending, over_quota_weights (docs/whatif.md, "The changes").',
    )
    wait_threshold_s = PlainIntegerField(
        min_value=0,
        max_value=MAX_WAIT_THRESHOLD_S,
        default=3600,
        help_text="A task counts in waited_past_threshold when it waited longer than this.",
    )
    title = StrictCharField(max_length=200, allow_blank=True, default="")


class NoDifferenceSerializer(serializers.Serializer):
    group = serializers.CharField(help_text="The group's slug.")
    name = serializers.CharField()
    rule = serializers.CharField(
        allow_null=True, help_text="The verdict rule that held its tasks most; null: they did not wait."
    )
    why = serializers.CharField(help_text="The reason in words, as the run's page says it.")


class WhatIfRunSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = WhatIfRun
        fields = [
            "id",
            "title",
            "created_by",
            "created_at",
            "start",
            "end",
            "groups",
            "changes",
            "wait_threshold_s",
            "state",
            "progress",
            "tasks",
            "error",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class WhatIfRunDetailSerializer(WhatIfRunSerializer):
    report = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text='The comparison once done (docs/whatif.md, "The report"); null before.',
    )

    no_difference = serializers.SerializerMethodField(
        help_text="The groups the change made no difference to, each with the rule that held it on the "
        'changed side and why in words (docs/whatif.md, "No difference"); empty before the run is done.'
    )

    class Meta(WhatIfRunSerializer.Meta):
        fields = [*WhatIfRunSerializer.Meta.fields, "report", "no_difference"]
        read_only_fields = fields

    @extend_schema_field(NoDifferenceSerializer(many=True))
    def get_no_difference(self, run):
        return NoDifferenceSerializer(selectors.no_difference_of(run), many=True).data
