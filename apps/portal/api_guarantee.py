"""GET /api/v1/groups/<slug>/guarantee/?period=month: a group's reservation as a measured
guarantee, for those who see the group's pages (``apps.portal.access.may_see_group``)."""

from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Group
from apps.policies.models import ResourcePolicy
from apps.portal import access, guarantees
from apps.tasks.guarantee_selectors import group_guarantee


class MissSerializer(serializers.Serializer):
    task = serializers.IntegerField()
    queued_at = serializers.DateTimeField()
    wait_s = serializers.FloatField()
    cause = serializers.CharField(help_text="The engine's wait reason (a verdict rule), start or unknown.")
    waiting = serializers.BooleanField(
        help_text="Still waiting, never placed: wait_s is its wait so far (only for the current period)."
    )


class GuaranteeSerializer(serializers.Serializer):
    group = serializers.CharField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    start_s = serializers.IntegerField(
        help_text="On time: started within this many seconds of its queue entry."
    )
    count = serializers.IntegerField(
        help_text="Runs placed within the reservation that started in the period, and work waiting past "
        "start_s now while the reservation had room for it."
    )
    kept = serializers.IntegerField()
    share = serializers.DecimalField(max_digits=7, decimal_places=4, allow_null=True)
    p50_s = serializers.FloatField(allow_null=True)
    p95_s = serializers.FloatField(allow_null=True)
    misses = MissSerializer(many=True)


PERIOD = OpenApiParameter("period", str, description="day, week, month (current, UTC) or YYYY-MM.")


def group_and_period(request, slug: str):
    """The group a group figure's endpoint names (404 for those who may not see its pages) and its
    ``period`` query parameter's bounds (400 naming the field)."""
    group = get_object_or_404(Group, slug=slug)
    if not access.may_see_group(request.user, group):
        raise NotFound()
    try:
        start, end = guarantees.bounds(request.query_params.get("period", "month"), timezone.now())
    except ValueError as error:
        raise ValidationError({"period": "day, week, month or YYYY-MM."}) from error
    return group, start, end


class GuaranteeView(APIView):
    @extend_schema(parameters=[PERIOD], responses=GuaranteeSerializer)
    def get(self, request, slug: str):
        group, start, end = group_and_period(request, slug)
        policy = ResourcePolicy.objects.filter(group=group).first()
        if policy is None:
            raise NotFound(f"{group} has no resource policy.")
        figures = group_guarantee(policy, start, end)
        data = {
            "group": group.slug,
            "period_start": start,
            "period_end": end,
            **{
                name: getattr(figures, name)
                for name in ("start_s", "count", "kept", "share", "p50_s", "p95_s")
            },
            "misses": [vars_of(miss) for miss in figures.misses],
        }
        return Response(GuaranteeSerializer(data).data)


def vars_of(miss) -> dict:
    return {
        "task": miss.task,
        "queued_at": miss.queued_at,
        "wait_s": miss.wait_s,
        "cause": miss.cause,
        "waiting": miss.waiting,
    }


urlpatterns = [path("groups/<slug:slug>/guarantee/", GuaranteeView.as_view(), name="api-group-guarantee")]
