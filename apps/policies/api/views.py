"""Compute resources a person may submit to, and the use and budgets of the groups they see."""

from dataclasses import asdict

from django.db.models import Count, Q
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import generics, viewsets
from rest_framework.response import Response

from apps.ledger.budgets import budget_status
from apps.policies import selectors
from apps.policies.api.serializers import ComputeResourceSerializer, UsageSerializer
from apps.policies.models import ComputeResource, ResourcePolicy
from apps.tasks.models import Task


class ComputeResourceFilter(filters.FilterSet):
    group = filters.CharFilter(field_name="policy__group__slug", help_text="Group slug.")
    profile = filters.CharFilter(field_name="profile__name")

    class Meta:
        model = ComputeResource
        fields = ["group", "profile", "enabled"]


class ComputeResourceViewSet(viewsets.ReadOnlyModelViewSet):
    """The compute resources of the groups you belong to: the ones you may submit to."""

    queryset = ComputeResource.objects.none()
    serializer_class = ComputeResourceSerializer
    filterset_class = ComputeResourceFilter

    def get_queryset(self):
        return (
            selectors.submittable_resources(self.request.user)
            .annotate(
                waiting=Count("tasks", filter=Q(tasks__state=Task.State.QUEUED)),
                running=Count("tasks", filter=Q(tasks__state__in=Task.ACTIVE_STATES)),
            )
            .order_by("name")
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
        rows = [
            {
                **asdict(statuses[p.pk]),
                "group": p.group,
                "reservation": p.reservation,
                "limit": p.limit,
                "over_threshold": statuses[p.pk].over_threshold,
                "windows": [
                    {**asdict(window), "over_threshold": window.over_threshold}
                    for window in statuses[p.pk].windows
                ],
            }
            for p in policies
        ]
        return Response(UsageSerializer(rows, many=True).data)
