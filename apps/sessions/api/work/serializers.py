from django.conf import settings
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.accounts.models import Project
from apps.core.fields import PlainIntegerField, StrictBooleanField, StrictCharField
from apps.policies.api.serializers import gpus_field
from apps.policies.models import ComputeResource, PriorityClass, ResourcePolicy
from apps.policies.selectors import may_submit, resource_is_visible
from apps.sessions.api.serializers import SessionSerializer
from apps.sessions.api.work.priority import PriorityField
from apps.sessions.models import SessionKind
from apps.sessions.selectors import session_view
from apps.tasks.fair_share import fair_shares_now
from apps.tasks.limits import MAX_COMMAND_CHARS, MAX_NODES, spec_error
from apps.tasks.models import Schedule, Task, TaskEvent
from apps.tasks.services.submission import BULK_MIN

VERDICT_HELP = (
    "Why the task waits, from the engine's last pass: {rule, message, ...details}, rule one of "
    "no_capacity, policy_limit, ancestor_limit, budget_start_check and budget_used_up (with window), "
    "behind_higher_priority, cloud_cap_reached (with reset_at), reclaim_held (reclaim waits for "
    "protected work, with cause min_runtime or max_preemptions and reset_at), never_fits (it is "
    "larger than every enabled pool of its profile, cause capacity, or no pool of its profile is "
    "enabled, cause no_pool; pools names the largest enabled), starving (it waited past its profile's "
    "starvation guard and holds pools for itself: it starts when needed GPUs are free there, with "
    "needed and free), starvation_hold (pools is held for an older task, cause its id). Empty when it "
    "does not wait or no pass has run yet."
)


def submit_allowed(context: dict, resource: ComputeResource) -> bool:
    """``may_submit`` for the request's user, asked once per resource and request."""
    known = context.setdefault("may_submit", {})
    if resource.pk not in known:
        known[resource.pk] = may_submit(context["request"].user, resource)
    return known[resource.pk]


class ComputeResourceField(StrictCharField):
    """A compute resource by name. One the user may not see reads as unknown, so that names do not
    leak; one they see but may not submit to is refused by the view with 403."""

    default_error_messages = {
        "unknown": "Unknown compute resource {name!r}; `klique resources` lists the ones you may use."
    }

    def __init__(self, **kwargs):
        super().__init__(max_length=120, **kwargs)

    def run_validation(self, data=serializers.empty):
        name = super().run_validation(data)
        # Looked up once per name and request: the items of a bulk submission share the context.
        found = self.context.setdefault("resources_by_name", {})
        if name not in found:
            resource = (
                ComputeResource.objects.select_related("policy__group", "profile").filter(name=name).first()
            )
            # Whoever may submit to a resource sees it, so the wider question is asked only then.
            visible = resource is not None and (
                submit_allowed(self.context, resource)
                or resource_is_visible(self.context["request"].user, resource)
            )
            found[name] = resource if visible else None
        if found[name] is None:
            self.fail("unknown", name=name)
        return found[name]

    def to_representation(self, value):
        return value.name


def spec_within_size(spec: dict) -> dict:
    error = spec_error(spec)
    if error:
        raise serializers.ValidationError(error)
    return spec


def command_field(**kwargs) -> serializers.CharField:
    return StrictCharField(max_length=MAX_COMMAND_CHARS, **kwargs)


def nodes_field(**kwargs) -> serializers.IntegerField:
    return PlainIntegerField(
        min_value=1,
        max_value=MAX_NODES,
        help_text="Nodes the task runs on, each with its GPUs (only on pools that run multi-node work); "
        "it counts GPUs x nodes against reservation and limit.",
        **kwargs,
    )


def project_in_group(
    name: str | None, resource: ComputeResource, found: dict | None = None
) -> Project | None:
    """The group's project of that name; ``found`` keeps the lookups of one request."""
    if not name:
        return None
    found = {} if found is None else found
    key = (resource.policy.group_id, name)
    if key not in found:
        found[key] = Project.objects.filter(group_id=resource.policy.group_id, name=name).first()
    project = found[key]
    if project is None:
        raise serializers.ValidationError(
            {"project": f"No project {name!r} in group {resource.policy.group} of {resource}."}
        )
    return project


class PreemptionSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name", allow_null=True, default=None)

    class Meta:
        model = TaskEvent
        fields = ["at", "kind", "reason", "pool"]


class TaskSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username")
    compute_resource = serializers.CharField(source="compute_resource.name")
    group = serializers.CharField(source="compute_resource.policy.group.slug")
    profile = serializers.CharField(source="compute_resource.profile.name")
    project = serializers.CharField(source="project.name", allow_null=True, default=None)
    agent = serializers.CharField(
        source="agent.name", allow_null=True, default=None, help_text="The agent that submitted it, if any."
    )
    pool = serializers.CharField(source="pool.name", allow_null=True, default=None)
    queue_position = serializers.SerializerMethodField(help_text="1-based place in line while waiting.")
    verdict = serializers.JSONField(help_text=VERDICT_HELP)
    session = serializers.SerializerMethodField(
        help_text="A session's URL, readiness and activity; its token only for its owner. "
        "Null for a batch task."
    )

    class Meta:
        model = Task
        fields = [
            "id",
            "kind",
            "name",
            "user",
            "agent",
            "compute_resource",
            "group",
            "profile",
            "project",
            "gpus",
            "nodes",
            "priority",
            "command",
            "channel",
            "state",
            "pool",
            "queue_position",
            "verdict",
            "checkpoint",
            "preemption_count",
            "last_preemption_reason",
            "stop_reason",
            "exit_code",
            "failure",
            "submitted_at",
            "placed_at",
            "started_at",
            "ended_at",
            "session",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_queue_position(self, task: Task) -> int | None:
        return self.context["positions"].get(task.pk)

    @extend_schema_field(SessionSerializer(allow_null=True))
    def get_session(self, task: Task) -> dict | None:
        session = self.context.get("sessions", {}).get(task.pk)
        return session_view(session, self.context["request"].user)


class FairShareSerializer(serializers.Serializer):
    parent = serializers.CharField(help_text="The parent group lending fairly (its slug).")
    borrowed = gpus_field(help_text="GPUs the group holds above its reservation now.")
    share = gpus_field(help_text="Its fair share of the GPUs its parent's children borrow.")


class TaskDetailSerializer(TaskSerializer):
    preemptions = serializers.SerializerMethodField(help_text="Preemptions and requeues, with reasons.")
    priority_class = serializers.SerializerMethodField(
        help_text="The name IT gave the task's priority (a priority class), or null."
    )
    fair_share = serializers.SerializerMethodField(
        help_text="When the parent of the task's group lends fairly: the GPUs the group borrows and "
        "its fair share of them. Null otherwise."
    )

    class Meta(TaskSerializer.Meta):
        fields = [*TaskSerializer.Meta.fields, "spec", "preemptions", "priority_class", "fair_share"]
        read_only_fields = fields

    @extend_schema_field(PreemptionSerializer(many=True))
    def get_preemptions(self, task: Task):
        return PreemptionSerializer(self.context["preemptions"], many=True).data

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_priority_class(self, task: Task) -> str | None:
        if "priority_classes" not in self.context:  # read once per request, shared by many tasks
            self.context["priority_classes"] = dict(PriorityClass.objects.values_list("value", "name"))
        return self.context["priority_classes"].get(task.priority)

    @extend_schema_field(FairShareSerializer(allow_null=True))
    def get_fair_share(self, task: Task) -> dict | None:
        if "fair_shares" not in self.context:
            self.context["fair_shares"] = fair_shares_now()
        fair = self.context["fair_shares"].get(task.compute_resource.policy_id)
        if fair is None:
            return None
        if "group_slugs" not in self.context:
            self.context["group_slugs"] = dict(ResourcePolicy.objects.values_list("pk", "group__slug"))
        parent = self.context["group_slugs"][fair.parent_id]
        return FairShareSerializer({"parent": parent, "borrowed": fair.borrowed, "share": fair.share}).data


class SessionKindField(StrictCharField):
    default_error_messages = {
        "unknown": "Unknown session kind {name!r}; GET /api/v1/session-kinds/ lists the ones offered."
    }

    def __init__(self, **kwargs):
        super().__init__(max_length=80, **kwargs)

    def run_validation(self, data=serializers.empty):
        name = super().run_validation(data)
        if name is None or name == "":
            return None
        kind = SessionKind.objects.filter(name=name, enabled=True).first()
        if kind is None:
            self.fail("unknown", name=name)
        return kind


class SubmitSerializer(serializers.Serializer):
    compute_resource = ComputeResourceField(help_text="The compute resource's name.")
    kind = serializers.ChoiceField(
        choices=Task.Kind.choices,
        default=Task.Kind.BATCH,
        help_text="batch (default) or session: a notebook or IDE server stopped by its idle limits.",
    )
    session_kind = SessionKindField(
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="Sessions only: the session kind's name (default: the first Jupyter kind offered).",
    )
    command = command_field(
        required=False,
        help_text="The command the worker runs (batch tasks; a session runs its kind's server).",
    )
    gpus = gpus_field(
        required=False,
        allow_null=True,
        help_text="GPUs per node, only for a profile that takes the size from the task (else leave it out).",
    )
    nodes = nodes_field(default=1)
    priority = PriorityField(required=False, allow_null=True)
    project = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=120, help_text="A project of the group."
    )
    name = StrictCharField(required=False, allow_blank=True, max_length=200, default="")
    checkpoint = StrictBooleanField(default=False, help_text="The task checkpoints and can resume.")
    spec = serializers.DictField(
        required=False,
        default=dict,
        validators=[spec_within_size],
        help_text="Environment, image and other run options; at most 64 KiB as JSON.",
    )

    def validate(self, data):
        if data["kind"] == Task.Kind.SESSION:
            extra = [name for name in ("command", "checkpoint", "spec") if name in self.initial_data]
            if extra:
                raise serializers.ValidationError(
                    {extra[0]: "A session runs its session kind's server; leave this out."}
                )
            if data["nodes"] != 1:
                raise serializers.ValidationError({"nodes": "A session runs on one node."})
        elif data.get("session_kind"):
            raise serializers.ValidationError(
                {"session_kind": "Only a session (kind: session) has a session kind."}
            )
        elif not data.get("command"):
            raise serializers.ValidationError({"command": "This field is required."})
        found = self.context.setdefault("projects_by_name", {})
        data["project"] = project_in_group(data.get("project"), data["compute_resource"], found)
        return data


class BulkSubmitSerializer(serializers.Serializer):
    """The body of ``POST tasks/bulk/`` (read by the view item by item, for errors by index)."""

    tasks = serializers.ListField(
        child=SubmitSerializer(),
        min_length=BULK_MIN,
        max_length=settings.TASKS_BULK_MAX,
        help_text="1 to TASKS_BULK_MAX (default 1000) batch tasks, each as POST tasks/ takes it; "
        "created in this order, all or none.",
    )


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
