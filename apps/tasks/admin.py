from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from apps.core.fields import PLAIN_NUMBERS, GpuAmountFormField
from apps.core.formsets import CappedInline
from apps.core.parsers import JSONFormField
from apps.engine.core.decisions import RULES
from apps.tasks import services
from apps.tasks.models import Channel, Schedule, ScheduleRun, Task, TaskDependency, TaskEvent
from apps.tasks.services.time_limits import resolve_time_limit
from klique import numbers


class TaskEventInline(CappedInline, admin.TabularInline):
    model = TaskEvent
    fields = ["at", "kind", "pool", "reason", "lost_gpu_hours", "actor", "detail"]
    readonly_fields = fields
    ordering = ["at", "pk"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class DependencyInline(CappedInline, admin.TabularInline):
    """The tasks this one runs after (read-only: dependencies are set at submission)."""

    model = TaskDependency
    fk_name = "task"
    fields = ["needs", "kind", "needs_state"]
    readonly_fields = fields
    ordering = ["needs_id"]
    extra = 0
    can_delete = False
    verbose_name = "task it runs after"
    verbose_name_plural = "tasks it runs after"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("needs")

    @admin.display(description="its state")
    def needs_state(self, link: TaskDependency) -> str:
        return link.needs.get_state_display()


class DependantInline(DependencyInline):
    """The tasks that run after this one."""

    fk_name = "needs"
    fields = ["task", "kind", "task_state"]
    readonly_fields = fields
    ordering = ["task_id"]
    verbose_name = "task that runs after it"
    verbose_name_plural = "tasks that run after it"

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("task")

    @admin.display(description="its state")
    def task_state(self, link: TaskDependency) -> str:
        return link.task.get_state_display()


class TaskAdminForm(forms.ModelForm):
    gpus = GpuAmountFormField(required=False, help_text=Task._meta.get_field("gpus").help_text)

    class Meta:
        model = Task
        fields = [
            "name",
            "user",
            "project",
            "compute_resource",
            "gpus",
            "nodes",
            "command",
            "spec",
            "channel",
            "checkpoint",
            "time_limit_s",
        ]
        field_classes = {"spec": JSONFormField}  # the API's limits on JSON (apps/core/parsers.py)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "nodes" in self.fields:
            self.fields["nodes"].required = False  # left empty: one node

    def clean_nodes(self):
        nodes = self.cleaned_data.get("nodes")
        return 1 if nodes is None else nodes

    def clean(self):
        data = super().clean()
        resource = data.get("compute_resource")
        if resource is not None and not self.instance.pk:
            try:
                data["gpus"] = services.task_size(resource, data.get("gpus"))
                data["nodes"] = services.check_nodes(resource, data["gpus"], data.get("nodes"))
                services.check_fits(resource, data["gpus"], data["nodes"])
                data["time_limit_s"] = resolve_time_limit(resource, data.get("time_limit_s"))
            except ValidationError as error:
                self.add_error(None, error)
        return data


class VerdictFilter(admin.SimpleListFilter):
    """Waiting tasks by the rule of the engine's last verdict ("never fits": IT must act), each
    shown in the engine's few words. The engine, above this app, owns them and hands them in
    (``words``: rule -> words, from ``apps.engine.verdict_words.RULE_WORDS``); a rule without
    words shows as its code in words ("never fits")."""

    title = "waits because"
    parameter_name = "verdict"
    words: dict[str, str] = {}

    def lookups(self, request, model_admin):
        return [(rule, self.words.get(rule) or rule.replace("_", " ")) for rule in RULES]

    def queryset(self, request, queryset):
        if self.value() in RULES:
            return queryset.filter(state=Task.State.QUEUED, verdict__rule=self.value())
        return queryset


@admin.display(description="GPUs", ordering="gpus")
def task_gpus(task: Task) -> str:
    return numbers.gpus(task.gpus)


@admin.display(description="time limit", ordering="time_limit_s")
def time_limit(row) -> str:
    return numbers.duration(row.time_limit_s)


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    form = TaskAdminForm
    list_display = [
        "id",
        "name",
        "user",
        "compute_resource",
        task_gpus,
        "nodes",
        "state",
        "pool",
        "queue_seq",
        "channel",
        "preemption_count",
        time_limit,
        "array",
        "submitted_at",
    ]
    list_filter = [
        "state",
        VerdictFilter,
        "channel",
        "pool",
        "compute_resource__profile",
        "last_preemption_reason",
    ]
    search_fields = ["name", "command", "user__username", "compute_resource__name"]
    list_select_related = ["user", "compute_resource", "pool", "array"]
    autocomplete_fields = ["user", "project", "compute_resource"]
    readonly_fields = [
        "state",
        "queue_seq",
        "pool",
        "submitted_at",
        "placed_at",
        "ended_at",
        "preemption_count",
        "last_preemption_reason",
        "exit_code",
        "ran_s",
        "waits_on",
        "array",
        "array_index",
    ]
    inlines = [DependencyInline, DependantInline, TaskEventInline]
    date_hierarchy = "submitted_at"

    def get_inlines(self, request, obj):
        """A task's dependencies are set at submission: shown on a submitted task's page only."""
        return self.inlines if obj is not None else [TaskEventInline]

    def get_readonly_fields(self, request, obj=None):
        """A submitted task changes only through its lifecycle (placement, stops, cancel), never by
        editing: its size, compute resource, user and project are what its usage interval records."""
        if obj is None:
            return self.readonly_fields
        return [f.name for f in Task._meta.fields if f.name != "name"]

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        submitted = services.submit(
            user=obj.user,
            compute_resource=obj.compute_resource,
            command=obj.command,
            gpus=obj.gpus,
            nodes=obj.nodes,
            name=obj.name,
            project=obj.project,
            checkpoint=obj.checkpoint,
            spec=obj.spec,
            time_limit_s=obj.time_limit_s,
            channel=Channel.ADMIN,
        )
        obj.pk = submitted.pk


@admin.register(TaskEvent)
class TaskEventAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = ["at", "task", "kind", "pool", "reason", "lost_gpu_hours", "actor"]
    list_filter = ["kind", "reason", "pool"]
    search_fields = ["task__name", "task__id"]
    list_select_related = ["task", "pool", "actor"]
    date_hierarchy = "at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ScheduleRunInline(CappedInline, admin.TabularInline):
    model = ScheduleRun
    fields = ["due_at", "task", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-due_at"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Schedules act as their owner, so IT reads them and can pause them but does not write them."""

    formfield_overrides = PLAIN_NUMBERS

    list_display = [
        "name",
        "owner",
        "cron",
        "compute_resource",
        time_limit,
        "active",
        "next_run_at",
        "stopped_reason",
    ]
    list_filter = ["active"]
    search_fields = ["name", "owner__username", "compute_resource__name"]
    list_select_related = ["owner", "compute_resource"]
    inlines = [ScheduleRunInline]
    actions = ["pause"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.action(description="Pause the selected schedules")
    def pause(self, request, queryset):
        for schedule in queryset:
            services.update_schedule(schedule, active=False)
