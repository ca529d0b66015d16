"""Tasks over the API: their representation (list and detail) and what a submission, a bulk
submission and an array take."""

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.accounts.models import Project
from apps.core.fields import PlainIntegerField, StrictBooleanField, StrictCharField
from apps.policies.api.serializers import gpus_field
from apps.policies.models import ComputeResource, PriorityClass, ResourcePolicy
from apps.policies.selectors import may_submit, resource_is_visible
from apps.sessions.api.serializers import SessionSerializer
from apps.sessions.api.work import limits
from apps.sessions.api.work.priority import PriorityField
from apps.sessions.models import SessionKind
from apps.sessions.selectors import session_view
from apps.tasks.fair_share import fair_shares_now
from apps.tasks.limits import MAX_COMMAND_CHARS, MAX_NODES, spec_error
from apps.tasks.models import Task, TaskEvent
from apps.tasks.services.submission import BULK_MIN

VERDICT_HELP = (
    "Why the task waits, from the engine's last pass: {rule, message, ...details}, rule one of "
    "no_capacity, policy_limit, ancestor_limit, budget_start_check and budget_used_up (with window), "
    "behind_higher_priority, cloud_cap_reached (with reset_at), reclaim_held (reclaim waits for "
    "protected work, with cause min_runtime or max_preemptions and reset_at), never_fits (it is "
    "larger than every enabled pool of its profile, cause capacity, or no pool of its profile is "
    "enabled, cause no_pool; pools names the largest enabled), starving (it waited past its profile's "
    "starvation guard and holds pools for itself: it starts when needed GPUs are free there, with "
    "needed and free), starvation_hold (pools is held for an older task, cause its id), dependency (it "
    "runs after tasks that have not ended, waits_for names them), array_limit (its array has max_running "
    "of its tasks placed or running, with array and max_running). Empty when it does not wait or no pass "
    "has run yet."
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
    time_limit_s = serializers.IntegerField(
        allow_null=True, help_text="Its time limit in running seconds; null: no limit."
    )
    ran_s = serializers.IntegerField(
        help_text="Running seconds of its earlier runs (before a requeue), counted against its time limit."
    )
    time_left_s = serializers.SerializerMethodField(
        help_text="Running seconds left before its time limit now (0 or less once reached); null: no limit."
    )
    after_ok = serializers.SerializerMethodField(help_text="The tasks it runs after, if they succeed.")
    after_any = serializers.SerializerMethodField(help_text="The tasks it runs after, whatever their end.")
    array = serializers.IntegerField(
        source="array_id", allow_null=True, help_text="The array it belongs to (tasks/array/); null: none."
    )
    array_index = serializers.IntegerField(
        allow_null=True, help_text="Its index in its array (KLIQUE_ARRAY_INDEX), from 0."
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
            "time_limit_s",
            "ran_s",
            "time_left_s",
            "after_ok",
            "after_any",
            "array",
            "array_index",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_time_left_s(self, task: Task) -> int | None:
        return limits.time_left(self.context, task)

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_after_ok(self, task: Task) -> list[int]:
        return limits.after(self.context, task, "after_ok")

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_after_any(self, task: Task) -> list[int]:
        return limits.after(self.context, task, "after_any")

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

    dependencies = serializers.SerializerMethodField(
        help_text="The tasks it runs after, each with the link's kind and its state now."
    )
    dependants = serializers.SerializerMethodField(
        help_text="The tasks that run after it, each with the link's kind and its state now."
    )

    class Meta(TaskSerializer.Meta):
        fields = [
            *TaskSerializer.Meta.fields,
            "spec",
            "preemptions",
            "priority_class",
            "fair_share",
            "dependencies",
            "dependants",
        ]
        read_only_fields = fields

    @extend_schema_field(limits.LinkSerializer(many=True))
    def get_dependencies(self, task: Task):
        return limits.LinkSerializer(limits.links(self.context, task).needs, many=True).data

    @extend_schema_field(limits.LinkSerializer(many=True))
    def get_dependants(self, task: Task):
        return limits.LinkSerializer(limits.links(self.context, task).dependants, many=True).data

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


# What a session does not take, and why (batch tasks only).
SESSION_REFUSES = {
    "time_limit_s": "A session has no time limit: its idle limits end it.",
    "after_ok": "A session starts when asked; it runs after no task.",
    "after_any": "A session starts when asked; it runs after no task.",
}
ARRAY_ELSEWHERE = "Submit an array (N tasks of one spec) through POST /api/v1/tasks/array/."


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
    time_limit_s = limits.time_limit_field()
    after_ok = limits.DependenciesField("after_ok")
    after_any = limits.DependenciesField("after_any")

    # Fields of an array (POST tasks/array/): refused elsewhere, so that they are never ignored.
    ARRAY_FIELDS = ("array", "max_running")
    takes_array = False

    def validate(self, data):
        if not self.takes_array:
            extra = [name for name in self.ARRAY_FIELDS if name in self.initial_data]
            if extra:
                raise serializers.ValidationError({extra[0]: ARRAY_ELSEWHERE})
        if data["kind"] == Task.Kind.SESSION:
            extra = [name for name in ("command", "checkpoint", "spec") if name in self.initial_data]
            if extra:
                raise serializers.ValidationError(
                    {extra[0]: "A session runs its session kind's server; leave this out."}
                )
            extra = [name for name in SESSION_REFUSES if data.get(name) not in (None, [])]
            if extra:
                raise serializers.ValidationError({extra[0]: SESSION_REFUSES[extra[0]]})
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


class ArraySubmitSerializer(SubmitSerializer):
    """The body of ``POST tasks/array/``: one batch task's fields, submitted ``array`` times."""

    takes_array = True
    array = PlainIntegerField(
        min_value=1,
        max_value=settings.TASKS_BULK_MAX,
        help_text="How many tasks: 1 to TASKS_BULK_MAX (default 1000), each with its index "
        "(KLIQUE_ARRAY_INDEX, from 0).",
    )
    max_running = PlainIntegerField(
        min_value=1,
        max_value=settings.TASKS_BULK_MAX,
        required=False,
        allow_null=True,
        help_text="At most this many of them placed or running at once; left out: no cap.",
    )


class ArraySubmittedSerializer(serializers.Serializer):
    array = serializers.IntegerField(help_text="The array's id (GET tasks/?array=ID lists its tasks).")
    size = serializers.IntegerField()
    max_running = serializers.IntegerField(allow_null=True)
    tasks = TaskDetailSerializer(many=True, help_text="Its tasks in index order.")


class BulkSubmitSerializer(serializers.Serializer):
    """The body of ``POST tasks/bulk/`` (read by the view item by item, for errors by index)."""

    tasks = serializers.ListField(
        child=SubmitSerializer(),
        min_length=BULK_MIN,
        max_length=settings.TASKS_BULK_MAX,
        help_text="1 to TASKS_BULK_MAX (default 1000) batch tasks, each as POST tasks/ takes it; "
        "created in this order, all or none.",
    )
