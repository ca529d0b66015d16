"""The quota split of a group among the units directly below it, as an API: ``/api/v1/splits/``.
The compute resources (``apps.sessions.api.work``) and the use of each policy (``apps.ledger.api``)
are served by the apps that count their work and their use."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from apps.accounts.models import Group
from apps.policies import selectors
from apps.policies.api.serializers import SplitRequestSerializer, SplitSerializer, money_windows_out
from apps.policies.models import ResourcePolicy
from apps.policies.services import QuotaChanged, extra_budgets_of
from apps.policies.split import SplitRefused, may_split_quota, split_quota

# The names of the rules' error keys in the API's words.
SPLIT_FIELDS = {"__all__": "non_field_errors", "extra_budgets": "windows", "money_budgets": "money_windows"}


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
                "money_windows": money_windows_out(money[policy.pk]) if policy.pk in money else {},
                "version": policy.version,
            }

        units = sorted(selectors.child_policies(parent), key=lambda child: child.group.name)
        money = selectors.money_windows([parent, *units])
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
                "money_budgets": row.get("money_windows"),
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
