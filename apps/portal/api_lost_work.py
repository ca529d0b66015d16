"""GET /api/v1/groups/<slug>/lost-work/?period=month: the GPU-hours a group's preemptions lost in a
period, per group of its subtree and reason (issue 37 part 4), for those who see the group's pages
(``apps.portal.access.may_see_group``)."""

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.portal.api_guarantee import PERIOD, group_and_period
from apps.tasks.lost_work import by_reason, lost_work

HOURS = {"max_digits": 18, "decimal_places": 6}


class LostLineSerializer(serializers.Serializer):
    group = serializers.CharField(help_text="The group (slug) whose own work was preempted.")
    reason = serializers.CharField(help_text="reclaim, fair_share, priority, budget, maintenance ...")
    preemptions = serializers.IntegerField()
    gpu_hours = serializers.DecimalField(**HOURS)


class LostWorkSerializer(serializers.Serializer):
    group = serializers.CharField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    gpu_hours = serializers.DecimalField(
        **HOURS, help_text="GPUs x (stop - the later of the last checkpoint and the run's start), summed."
    )
    by_reason = serializers.DictField(child=serializers.DecimalField(**HOURS))
    lines = LostLineSerializer(many=True)


class LostWorkView(APIView):
    @extend_schema(parameters=[PERIOD], responses=LostWorkSerializer)
    def get(self, request, slug: str):
        group, start, end = group_and_period(request, slug)
        lines = lost_work(group, start, end)
        reasons = by_reason(lines)
        data = {
            "group": group.slug,
            "period_start": start,
            "period_end": end,
            "gpu_hours": sum(reasons.values(), start=0),
            "by_reason": reasons,
            "lines": [vars(line) for line in lines],
        }
        return Response(LostWorkSerializer(data).data)


urlpatterns = [path("groups/<slug:slug>/lost-work/", LostWorkView.as_view(), name="api-group-lost-work")]
