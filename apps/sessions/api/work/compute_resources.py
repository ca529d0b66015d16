"""``/api/v1/compute-resources/``: the compute resources a person may submit to, each with its
profile, its policy's sizes and the work waiting and running in it now."""

from django.db.models import Count, Q
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers, viewsets

from apps.policies import selectors
from apps.policies.api.serializers import GroupRefSerializer, gpus_field
from apps.policies.models import ComputeResource
from apps.tasks.models import Task
from apps.tasks.services import priority, time_limits


class ComputeResourceSerializer(serializers.ModelSerializer):
    group = GroupRefSerializer(source="policy.group")
    profile = serializers.CharField(source="profile.name")
    gpus = gpus_field(
        source="profile.gpus", help_text="The profile's GPU size (the default if sized by task)."
    )
    size_from_task = serializers.BooleanField(source="profile.size_from_task")
    time_weight = serializers.DecimalField(source="profile.time_weight", max_digits=6, decimal_places=3)
    min_runtime_s = serializers.IntegerField(
        source="profile.min_runtime_s",
        help_text="Seconds a placed task is safe from reclaim (0: no minimum).",
    )
    sovereign_country = serializers.CharField(
        source="profile.sovereign_country",
        help_text="ISO 3166-1 alpha-2 code: the profile runs only on pools in that country; "
        "empty: not sovereign.",
    )
    min_gpu_memory_gb = serializers.IntegerField(
        source="profile.min_gpu_memory_gb",
        allow_null=True,
        help_text="The profile's pools have GPUs with at least this much memory (GB); null: no minimum.",
    )
    min_gpu_generation = serializers.IntegerField(
        source="profile.min_gpu_generation",
        allow_null=True,
        help_text="The profile's pools have GPUs of this generation or newer; null: any.",
    )
    reservation = gpus_field(source="policy.reservation")
    limit = gpus_field(source="policy.limit")
    max_preemptions_per_hour = serializers.IntegerField(
        source="policy.max_preemptions_per_hour",
        allow_null=True,
        help_text="Most of the group's tasks reclaim takes in any sliding hour; null: no cap.",
    )
    lending = serializers.CharField(
        source="policy.lending",
        help_text='How the group\'s own child groups share what they borrow: "priority" or "fair".',
    )
    over_quota_weight = serializers.DecimalField(
        source="policy.over_quota_weight",
        max_digits=8,
        decimal_places=3,
        help_text='The group\'s weight when its parent lends "fair".',
    )
    lendable = gpus_field(
        source="policy.lendable",
        allow_null=True,
        help_text="GPUs of the group's idle reservation that may be lent; null: all of it.",
    )
    starvation_s = serializers.IntegerField(
        source="profile.starvation_s",
        allow_null=True,
        help_text="Seconds a queue head waits for free GPUs before it holds a pool; null: never.",
    )
    default_priority = serializers.SerializerMethodField(
        help_text="The priority of a task sent here that asks for none."
    )
    max_priority = serializers.SerializerMethodField(
        help_text="The highest priority a task sent here may ask for; null: no cap."
    )
    default_time_limit_s = serializers.SerializerMethodField(
        help_text="The time limit (running seconds) of a batch task sent here that asks for none; "
        "null: no limit."
    )
    max_time_limit_s = serializers.SerializerMethodField(
        help_text="The longest time limit a task sent here may ask for; null: no cap."
    )
    waiting = serializers.IntegerField(help_text="Tasks waiting in this compute resource now.")
    running = serializers.IntegerField(help_text="Tasks placed, running or stopping now.")

    class Meta:
        model = ComputeResource
        fields = [
            "id",
            "name",
            "group",
            "profile",
            "gpus",
            "size_from_task",
            "time_weight",
            "min_runtime_s",
            "sovereign_country",
            "min_gpu_memory_gb",
            "min_gpu_generation",
            "reservation",
            "limit",
            "max_preemptions_per_hour",
            "lending",
            "over_quota_weight",
            "lendable",
            "starvation_s",
            "default_priority",
            "max_priority",
            "default_time_limit_s",
            "max_time_limit_s",
            "enabled",
            "waiting",
            "running",
        ]

    @extend_schema_field(serializers.IntegerField())
    def get_default_priority(self, resource: ComputeResource) -> int:
        return priority.default_priority(resource)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_max_priority(self, resource: ComputeResource) -> int | None:
        return priority.max_priority(resource)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_default_time_limit_s(self, resource: ComputeResource) -> int | None:
        return time_limits.resolve_time_limit(resource, None)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_max_time_limit_s(self, resource: ComputeResource) -> int | None:
        return time_limits.max_time_limit(resource)


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
