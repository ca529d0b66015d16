"""A developer's tables: their work (each task in their words, its place in line and why it waits),
where they may submit, and their notifications."""

from decimal import Decimal

import django_tables2 as tables
from django.utils.html import format_html

from apps.accounts.models import Notification
from apps.portal import words
from apps.portal.it_tables import EventTable, event_actor
from apps.portal.tables import (
    NUM,
    GpuColumn,
    Grid,
    WhenColumn,
    actions_column,
    exact_gpus,
    gpus,
    notification_message,
    profile_label,
    task_gpus,
    when,
)
from apps.portal.task_runs import limits_text
from apps.tasks.models import Task


def work_state(task: Task) -> str:
    """The task in the developer's words: waiting, requeued, starting, running, stopping or how it ended."""
    if task.state == Task.State.QUEUED:
        return "requeued" if task.preemption_count else "waiting"
    if task.state == Task.State.PLACED:
        return "starting"
    return task.get_state_display().lower()


# Ends the "Why / where" cell explains in words rather than by an exit code.
ENDED_BY = (Task.StopReason.TIME_LIMIT, Task.StopReason.DEPENDENCY_FAILED)


class TaskTable(tables.Table):
    id = tables.Column(verbose_name="Task", linkify=("portal:task", {"pk": tables.A("pk")}))
    compute_resource = tables.Column(order_by="compute_resource__name")
    gpus = GpuColumn(verbose_name="GPUs")
    state = tables.Column(verbose_name="State", order_by="state")
    place = tables.Column(verbose_name="Place in line", empty_values=(), orderable=False, attrs=NUM)
    why = tables.Column(verbose_name="Why / where", empty_values=(), orderable=False)
    since = tables.Column(verbose_name="Since", empty_values=(), order_by="placed_at")
    borrowed = tables.Column(verbose_name="Borrowed GPUs", empty_values=(), orderable=False, attrs=NUM)
    preemption_count = tables.Column(verbose_name="Preemptions", attrs=NUM)
    submitted_at = WhenColumn(verbose_name="Submitted")
    actions = actions_column("portal/_task_actions.html")

    class Meta(Grid):
        model = Task
        fields = ["id", "name", "compute_resource", "gpus", "state"]
        sequence = [
            "id",
            "name",
            "compute_resource",
            "gpus",
            "state",
            "place",
            "why",
            "since",
            "borrowed",
            "...",
        ]
        empty_text = "No tasks here."
        order_by = "-id"

    def __init__(self, *args, positions: dict[int, int], borrowed: dict[int, Decimal], **kwargs):
        super().__init__(*args, **kwargs)
        self.positions, self.borrowed_gpus = positions, borrowed

    def render_gpus(self, record):
        return task_gpus(record)

    def value_gpus(self, record):
        return f"{record.nodes} x {exact_gpus(record.gpus)}" if record.nodes > 1 else exact_gpus(record.gpus)

    def render_state(self, record):
        return work_state(record)

    def render_place(self, record):
        return self.positions.get(record.pk, "—")

    def render_why(self, record):
        if record.state == Task.State.QUEUED:
            message = (record.verdict or {}).get("message", "Waiting for the engine's next pass.")
            if record.preemption_count:
                reason = (
                    Task.StopReason(record.last_preemption_reason).label
                    if record.last_preemption_reason
                    else ""
                )
                return f"Requeued: {reason}. {message}"
            return message
        if record.state in Task.ACTIVE_STATES:
            return f"on {record.pool}"
        if record.stop_reason in ENDED_BY:
            return words.stop_reason(record.stop_reason)[0]
        if record.exit_code is not None:
            return f"exit code {record.exit_code}"
        return "—"

    def render_since(self, record):
        return when(record.started_at or record.placed_at) if record.state in Task.ACTIVE_STATES else "—"

    def render_borrowed(self, record):
        share = self.borrowed_gpus.get(record.pk)
        return gpus(share) if share else ("no" if record.state in Task.ACTIVE_STATES else "—")


class ResourceTable(tables.Table):
    """Where a developer may submit, marked when a used-up budget holds it."""

    name = tables.Column(verbose_name="Compute resource", accessor="0__name")
    group = tables.Column(verbose_name="Group", accessor="0__policy__group__name")
    profile = tables.Column(verbose_name="Profile", accessor="0__profile__name")
    size = tables.Column(verbose_name="GPU size", accessor="0__profile__gpus", attrs=NUM)
    budget = tables.Column(verbose_name="Budget", accessor="1", empty_values=(), orderable=False)
    time_limit = tables.Column(verbose_name="Time limit", accessor="0", empty_values=(), orderable=False)

    class Meta(Grid):
        prefix = "resources-"
        empty_text = "You are in no group with a compute resource yet: ask your team lead."

    def render_size(self, value, record):
        return "set per task" if record[0].profile.size_from_task else gpus(value)

    def render_profile(self, record):
        return profile_label(record[0].profile)

    def value_profile(self, value):
        return value

    def render_time_limit(self, value):
        return limits_text(value)

    def render_budget(self, value):
        css = "badge over" if value.held else ("badge exempt" if value.exempt else "")
        return format_html('<span class="{}" title="{}">{}</span>', css, value.explanation(), value.text())

    def value_budget(self, value):
        return value.text()


class NotificationTable(tables.Table):
    created_at = WhenColumn(verbose_name="When")
    kind = tables.Column()
    message = tables.Column(orderable=False)
    read_at = tables.Column(verbose_name="Read", empty_values=())
    actions = actions_column("portal/_notification_actions.html")

    class Meta(Grid):
        model = Notification
        fields = ["created_at", "kind", "message", "read_at"]
        empty_text = "No notifications."
        row_attrs = {"class": lambda record: "unread" if record.read_at is None else ""}

    def render_kind(self, record):
        return words.explained(*words.notification_kind(record.kind))

    def value_kind(self, record):
        return words.notification_kind(record.kind)[0]

    def render_message(self, value, record):
        """The message, linked to what it is about (a preempted task's page) when it has a link."""
        return notification_message(record)

    def value_message(self, value):
        return value

    def render_read_at(self, value):
        return when(value) if value else "unread"


class TaskHistoryTable(EventTable):
    """A task's events, each with who or what acted (``event_actor``)."""

    actor = tables.Column(verbose_name="By", empty_values=(), orderable=False)

    def render_actor(self, record):
        return event_actor(record)

    def value_actor(self, record):
        return event_actor(record)
