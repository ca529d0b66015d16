"""Filters of the portal's tables (django-filter). A bad value is refused on the form, with a 400."""

import django_filters

from apps.accounts.models import Notification
from apps.policies.models import ComputeResource
from apps.portal.selectors import WORK_STATES
from apps.tasks.models import Task, TaskEvent


class TaskFilter(django_filters.FilterSet):
    where = django_filters.ChoiceFilter(
        label="State", choices=[(k, k) for k in WORK_STATES], method="filter_where", empty_label="any"
    )
    compute_resource = django_filters.CharFilter(
        field_name="compute_resource__name", lookup_expr="icontains", label="Compute resource"
    )

    class Meta:
        model = Task
        fields = []

    def filter_where(self, queryset, name, value):
        return queryset.filter(WORK_STATES[value])


class EventFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=TaskEvent.Kind.choices, empty_label="any")
    pool = django_filters.CharFilter(field_name="pool__name", label="Pool")
    task = django_filters.NumberFilter(field_name="task_id", label="Task")
    compute_resource = django_filters.CharFilter(
        field_name="task__compute_resource__name", lookup_expr="icontains", label="Compute resource"
    )

    class Meta:
        model = TaskEvent
        fields = []


class QueueFilter(django_filters.FilterSet):
    group = django_filters.CharFilter(field_name="policy__group__name", lookup_expr="icontains")
    waiting_only = django_filters.BooleanFilter(label="Only with work waiting", method="filter_waiting")

    class Meta:
        model = ComputeResource
        fields = []

    def filter_waiting(self, queryset, name, value):
        return queryset.filter(waiting__gt=0) if value else queryset


class NotificationFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(
        choices=[("unread", "unread"), ("read", "read")], method="filter_status", empty_label="all"
    )

    class Meta:
        model = Notification
        fields = ["kind"]

    def filter_status(self, queryset, name, value):
        return queryset.filter(read_at__isnull=value == "unread")
