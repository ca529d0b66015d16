"""Compute resources a person may submit to, the use and budgets of the groups they see, and the
quota split of a group among the units directly below it."""

from dataclasses import asdict

from django.db.models import Count, Q
from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status, viewsets
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from apps.accounts.models import Group
from apps.ledger.budgets import budget_status
from apps.policies import selectors
from apps.policies.api.serializers import (
    ComputeResourceSerializer,
    SplitRequestSerializer,
    SplitSerializer,
    UsageSerializer,
)
from apps.policies.models import ComputeResource, ResourcePolicy
from apps.policies.services import QuotaChanged, extra_budgets_of
from apps.portal.selectors import may_split_quota
from apps.portal.services import SplitRefused, split_quota
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


# The names of the rules' error keys in the API's words.
SPLIT_FIELDS = {"__all__": "non_field_errors", "extra_budgets": "windows"}


class SplitView(generics.GenericAPIView):
    """The quota split of a group among the units directly below it, as on the portal's split page:
    IT, the department's heads and its tenant admins split a department; leadership the organisation.
    A split carries each unit's ``version``: one saved since refuses the split whole (409)."""

    queryset = ResourcePolicy.objects.none()
    serializer_class = SplitSerializer
    pagination_class = None
    filter_backends = []
    error_statuses = {"get": (403,), "post": (403, 409)}

    def _parent(self, group_slug: str) -> ResourcePolicy:
        group = get_object_or_404(Group, slug=group_slug)
        if not may_split_quota(self.request.user, group):
            raise PermissionDenied(f"Only IT and those who decide for {group} share out its quota.")
        return get_object_or_404(ResourcePolicy.objects.select_related("group"), group=group)

    @staticmethod
    def _split(parent: ResourcePolicy) -> dict:
        def quota(policy: ResourcePolicy) -> dict:
            return {
                "group": policy.group,
                "reservation": policy.reservation,
                "limit": policy.limit,
                "budget_hours": policy.budget_hours,
                "budget_period": policy.budget_period,
                "windows": extra_budgets_of(policy),
                "version": policy.version,
            }

        units = sorted(selectors.child_policies(parent), key=lambda child: child.group.name)
        return SplitSerializer({**quota(parent), "units": [quota(unit) for unit in units]}).data

    @extend_schema(responses=SplitSerializer)
    def get(self, request, group_slug: str):
        return Response(self._split(self._parent(group_slug)))

    @extend_schema(request=SplitRequestSerializer, responses=SplitSerializer)
    def post(self, request, group_slug: str):
        """Set the units' reservation, limit and time budget together (the units left out keep
        theirs); a broken rule refuses the whole split, naming the unit and the field."""
        parent = self._parent(group_slug)
        incoming = SplitRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        rows = incoming.validated_data["units"]
        below = {child.group.slug: child for child in selectors.child_policies(parent)}
        strangers = {
            row["group"]: {"group": [f"{row['group']} is not directly below {parent.group.name}."]}
            for row in rows
            if row["group"] not in below
        }
        if strangers:
            raise serializers.ValidationError({"units": strangers})
        values = {
            below[row["group"]].pk: {
                "reservation": row["reservation"],
                "limit": row["limit"],
                "budget_hours": row["budget_hours"],
                "budget_period": row["budget_period"],
                "extra_budgets": row.get("windows"),
            }
            for row in rows
        }
        versions = {below[row["group"]].pk: row["version"] for row in rows}
        try:
            split_quota(parent, values, actor=request.user, versions=versions)
        except QuotaChanged as changed:
            return Response({"detail": changed.message}, status=status.HTTP_409_CONFLICT)
        except SplitRefused as refused:
            slugs = {policy.pk: slug for slug, policy in below.items()}
            raise serializers.ValidationError(
                {
                    "units": {
                        slugs[pk]: {SPLIT_FIELDS.get(key, key): texts for key, texts in errors.items()}
                        for pk, errors in refused.errors.items()
                    }
                }
            ) from refused
        return Response(self._split(parent))
