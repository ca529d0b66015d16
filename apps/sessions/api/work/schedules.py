"""Schedules over the API (``/api/v1/schedules/``): the task template each due time submits,
its cron expression and its latest runs."""

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.fields import StrictBooleanField, StrictCharField
from apps.policies.api.serializers import gpus_field
from apps.sessions.api.work.limits import time_limit_field
from apps.sessions.api.work.priority import PriorityField
from apps.sessions.api.work.serializers import (
    ComputeResourceField,
    command_field,
    nodes_field,
    project_in_group,
    spec_within_size,
)
from apps.tasks.models import Schedule


class ScheduleRunSerializer(serializers.Serializer):
    due_at = serializers.DateTimeField()
    task = serializers.IntegerField(source="task_id", allow_null=True)


class ScheduleSerializer(serializers.ModelSerializer):
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
        models.BooleanField: StrictBooleanField,
    }
    owner = serializers.CharField(source="owner.username", read_only=True)
    compute_resource = ComputeResourceField()
    project = StrictCharField(
        source="project.name", required=False, allow_null=True, allow_blank=True, max_length=120
    )
    gpus = gpus_field(required=False, allow_null=True)
    nodes = nodes_field(required=False)
    spec = serializers.DictField(required=False, validators=[spec_within_size])
    priority = PriorityField(
        required=False,
        allow_null=True,
        help_text="What each run asks for, resolved at its due time: a whole number or a priority "
        "class's name; null: the compute resource's default then.",
    )
    time_limit_s = time_limit_field(
        help_text="Each run's time limit in seconds, checked at each due time; null: the compute "
        "resource's default then."
    )
    command = command_field()
    cron = StrictCharField(max_length=100, help_text="Five-field cron expression, evaluated in UTC.")

    class Meta:
        model = Schedule
        fields = [
            "id",
            "name",
            "owner",
            "cron",
            "compute_resource",
            "command",
            "gpus",
            "nodes",
            "project",
            "checkpoint",
            "spec",
            "priority",
            "time_limit_s",
            "active",
            "stopped_reason",
            "stopped_at",
            "next_run_at",
            "last_run_at",
            "created_at",
        ]
        read_only_fields = ["stopped_reason", "stopped_at", "next_run_at", "last_run_at", "created_at"]

    def validate(self, data):
        if "project" in data:
            resource = data.get("compute_resource") or self.instance.compute_resource
            data["project"] = project_in_group((data["project"] or {}).get("name"), resource)
        return data


class ScheduleDetailSerializer(ScheduleSerializer):
    runs = serializers.SerializerMethodField(help_text="The latest due times and the tasks they submitted.")

    class Meta(ScheduleSerializer.Meta):
        fields = [*ScheduleSerializer.Meta.fields, "runs"]

    @extend_schema_field(ScheduleRunSerializer(many=True))
    def get_runs(self, schedule: Schedule):
        return ScheduleRunSerializer(schedule.runs.all()[:20], many=True).data
