from datetime import UTC

from django.core.exceptions import ValidationError
from django.db.models import Q
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema_field

from apps.core.fields import PlainIntegerFormField
from apps.tasks.models import Channel, Schedule, Task
from apps.tasks.selectors import STATE_FILTERS


class UtcDateTimeField(IsoDateTimeField):
    """An ISO 8601 time turned into UTC before it reaches the database (PostgreSQL refuses
    offsets beyond 15:59 hours)."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(UTC)
        except OverflowError as error:
            raise ValidationError("Enter a time between the years 1 and 9999 in UTC.") from error


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


ID_MAX = 2**63 - 1


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": ID_MAX})
class IdFilter(filters.NumberFilter):
    """An object's id: a plain whole number within what the database stores."""

    field_class = PlainIntegerFormField

    def __init__(self, **kwargs):
        super().__init__(min_value=1, max_value=ID_MAX, **kwargs)


class TaskFilter(filters.FilterSet):
    state = filters.MultipleChoiceFilter(
        choices=[(value, value) for value in STATE_FILTERS],
        method="filter_state",
        help_text="Repeat for several states: " + ", ".join(STATE_FILTERS) + " (waiting: queued and never "
        "preempted; requeued: queued again after a preemption; done: succeeded, failed, canceled or "
        "timed_out).",
        error_messages={
            "invalid_choice": "Unknown state %(value)s: use one of " + ", ".join(STATE_FILTERS) + "."
        },
    )
    channel = filters.ChoiceFilter(choices=Channel.choices)
    kind = filters.ChoiceFilter(choices=Task.Kind.choices, help_text="batch or session.")
    compute_resource = filters.CharFilter(field_name="compute_resource__name")
    group = filters.CharFilter(field_name="compute_resource__policy__group__slug", help_text="Group slug.")
    user = filters.CharFilter(field_name="user__username")
    project = filters.CharFilter(field_name="project__name")
    submitted_after = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="lt")
    mine = filters.BooleanFilter(method="filter_mine", help_text="Only the tasks you submitted.")
    array = IdFilter(field_name="array_id", help_text="Only the tasks of this array (tasks/array/).")

    class Meta:
        model = Task
        fields = ["state", "kind", "channel", "compute_resource", "group", "user", "project"]

    def filter_state(self, queryset, name, values):
        if not values:
            return queryset
        condition = Q()
        for value in values:
            condition |= STATE_FILTERS[value]
        return queryset.filter(condition)

    def filter_mine(self, queryset, name, value):
        return queryset.filter(user=self.request.user) if value else queryset


class ScheduleFilter(filters.FilterSet):
    active = filters.BooleanFilter()
    compute_resource = filters.CharFilter(field_name="compute_resource__name")

    class Meta:
        model = Schedule
        fields = ["active", "compute_resource"]
