"""IT's tables: the pools (declared and live capacity, use, borrowing), the cloud nodes, the queues,
the policies near their budget (also a department's teams), the engine's passes, the tasks that
never fit and the event log (also a task's history)."""

import django_tables2 as tables
from django.utils.html import format_html

from apps.cloud.models import CloudNode
from apps.engine.models import PassRecord
from apps.portal import words
from apps.portal.tables import (
    NUM,
    GpuColumn,
    Grid,
    WhenColumn,
    WindowsColumn,
    exact_gpus,
    exact_hours,
    hours,
    hours_left,
    profile_label,
    run_out,
    task_gpus,
)
from apps.tasks.models import Task, TaskEvent
from klique import numbers


class PoolTable(tables.Table):
    name = tables.Column(verbose_name="Pool", accessor="pool__name")
    kind = tables.Column(verbose_name="Kind", accessor="pool__get_kind_display", order_by="pool__kind")
    gpu_type = tables.Column(verbose_name="GPU type", accessor="pool__gpu_type__name")
    region = tables.Column(verbose_name="Region", accessor="pool__region")
    country = tables.Column(verbose_name="Country", accessor="pool__country")
    capacity = GpuColumn(verbose_name="Declared", accessor="pool__capacity")
    observed = GpuColumn(verbose_name="Live daemons have", default="—")
    in_use = GpuColumn(verbose_name="In use")
    borrowed = GpuColumn(verbose_name="Borrowed")
    free = GpuColumn(verbose_name="Free")
    utilisation = tables.Column(verbose_name="Used %", attrs=NUM)
    workers = tables.Column(verbose_name="Workers", attrs=NUM)

    class Meta(Grid):
        prefix = "pools-"
        empty_text = "No pools."

    def render_utilisation(self, value):
        return numbers.count(value)

    def render_observed(self, value, record):
        if not record.differs:
            return numbers.gpus(value)
        return format_html(
            '{} <span class="badge over" title="{}">not as declared</span>',
            numbers.gpus(value),
            f"The live worker daemons have {numbers.gpus(value)} GPUs, IT declared "
            f"{numbers.gpus(record.pool.capacity)}: the engine places against "
            f"{numbers.gpus(record.capacity)}.",
        )


class CloudNodeTable(tables.Table):
    """The nodes the autoscaler launched, from launch to termination and why."""

    pool = tables.Column(verbose_name="Pool", accessor="cloud_pool__pool__name")
    name = tables.Column(verbose_name="Node")
    instance_type = tables.Column(verbose_name="Type", accessor="instance_type_name")
    market = tables.Column(verbose_name="Market", accessor="get_market_display", order_by="market")
    state = tables.Column(verbose_name="State", accessor="get_state_display", order_by="state")
    launched_at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="Launched (UTC)", default="—")
    enrolled_at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="Enrolled (UTC)", default="—")
    terminated_at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="Terminated (UTC)", default="—")
    reason = tables.Column(verbose_name="Reason", default="")

    class Meta(Grid):
        model = CloudNode
        fields = []
        prefix = "nodes-"
        empty_text = "No cloud node has been launched."


class QueueTable(tables.Table):
    name = tables.Column(verbose_name="Compute resource")
    group = tables.Column(
        verbose_name="Group", accessor="policy__group__name", order_by="policy__group__name"
    )
    profile = tables.Column(verbose_name="Profile", accessor="profile__name", order_by="profile__name")
    waiting = tables.Column(attrs=NUM)
    waiting_gpus = GpuColumn(verbose_name="GPUs waiting")
    running = tables.Column(verbose_name="Placed or running", attrs=NUM)
    running_gpus = GpuColumn(verbose_name="GPUs in use")
    oldest_wait = WhenColumn(verbose_name="Waiting since")

    class Meta(Grid):
        prefix = "queues-"
        empty_text = "No compute resources."
        order_by = "-waiting"

    def render_profile(self, record):
        return profile_label(record.profile)

    def value_profile(self, value):
        return value


class PolicyUseTable(tables.Table):
    """Policies with their use and budget: the IT view's budgets near their limit, a department's teams."""

    group = tables.Column(verbose_name="Group", accessor="policy__group__name")
    reservation = GpuColumn(verbose_name="Reservation", accessor="policy__reservation")
    limit = GpuColumn(verbose_name="Limit", accessor="policy__limit")
    in_use = GpuColumn(verbose_name="In use", accessor="status__gpus_in_use")
    borrowed = GpuColumn()
    waiting = tables.Column(attrs=NUM)
    budget = WindowsColumn(
        lambda w: hours(w.budget_hours),
        exported=lambda w: exact_hours(w.budget_hours),
        verbose_name="Budget (h)",
        accessor="status__budget_hours",
    )
    period = WindowsColumn(
        lambda w: w.period or "—", verbose_name="Period", accessor="status__period", number=False
    )
    used = WindowsColumn(
        lambda w: hours(w.used_hours),
        exported=lambda w: exact_hours(w.used_hours),
        verbose_name="Used (h)",
        accessor="status__used_hours",
    )
    left = WindowsColumn(
        lambda w: hours_left(w.left_hours),
        exported=lambda w: exact_hours(w.left_hours),
        verbose_name="Left (h)",
        accessor="status__left_hours",
    )
    burn_rate = WindowsColumn(
        lambda w: hours(w.burn_rate),
        exported=lambda w: exact_hours(w.burn_rate),
        verbose_name="Burn rate (h/h)",
        accessor="status__burn_rate",
    )
    run_out = WindowsColumn(
        run_out, verbose_name="Projected run-out", accessor="status", orderable=False, number=False
    )

    class Meta(Grid):
        empty_text = "None."


class PassTable(tables.Table):
    started_at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="Started (UTC)")
    skipped = tables.BooleanColumn()
    skip_reason = tables.Column()
    duration_ms = tables.Column(verbose_name="Duration (ms)", attrs=NUM)
    placed = tables.Column(attrs=NUM)
    preempted = tables.Column(attrs=NUM)
    waiting = tables.Column(attrs=NUM)
    running = tables.Column(attrs=NUM)

    class Meta(Grid):
        model = PassRecord
        fields = []
        prefix = "passes-"
        empty_text = "The engine has not run a pass yet."

    def render_duration_ms(self, value):
        return numbers.milliseconds(value)


class NeverFitsTable(tables.Table):
    """Queued tasks no enabled pool of their profile can ever hold (verdict ``never_fits``)."""

    task = tables.Column(
        verbose_name="Task", accessor="pk", linkify=("portal:task", {"pk": tables.A("pk")}), order_by="pk"
    )
    group = tables.Column(
        verbose_name="Group",
        accessor="compute_resource__policy__group__name",
        order_by="compute_resource__policy__group__name",
    )
    compute_resource = tables.Column(verbose_name="Compute resource", order_by="compute_resource__name")
    size = tables.Column(verbose_name="GPUs", empty_values=(), order_by=("gpus", "nodes"), attrs=NUM)
    cause = tables.Column(verbose_name="Cause", accessor="verdict__cause", orderable=False, default="—")
    message = tables.Column(verbose_name="Why", accessor="verdict__message", orderable=False, default="")
    submitted_at = WhenColumn(verbose_name="Submitted")

    class Meta(Grid):
        model = Task
        fields = []
        prefix = "neverfits-"
        empty_text = "No waiting task is larger than every enabled pool of its profile."

    def render_size(self, record):
        return task_gpus(record)

    def value_size(self, record):
        return f"{record.nodes} x {exact_gpus(record.gpus)}" if record.nodes > 1 else exact_gpus(record.gpus)

    def render_cause(self, value):
        return words.explained(*words.never_fits_cause(value))

    def value_cause(self, value):
        return words.never_fits_cause(value)[0]


WORKER_KINDS = {TaskEvent.Kind.CLAIMED, TaskEvent.Kind.STARTED}


def event_actor(event: TaskEvent) -> str:
    """Who or what acted: the person, the worker that claimed, started or ended the task (its
    report carries the worker or the exit code), else the engine."""
    if event.actor_id:
        return str(event.actor)
    detail = event.detail or {}
    if detail.get("worker"):
        return f"worker {detail['worker']}"
    if event.kind in WORKER_KINDS or "exit_code" in detail:
        return "its worker"
    return "engine"


class EventTable(tables.Table):
    at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="At (UTC)")
    task = tables.Column(linkify=("portal:task", {"pk": tables.A("task_id")}), order_by="task_id")
    compute_resource = tables.Column(
        verbose_name="Compute resource", accessor="task__compute_resource__name", orderable=False
    )
    kind = tables.Column()
    reason = tables.Column()
    pool = tables.Column(order_by="pool__name")
    actor = tables.Column(verbose_name="By", empty_values=(), orderable=False)

    class Meta(Grid):
        model = TaskEvent
        fields = []
        prefix = "events-"
        empty_text = "No events."

    def render_reason(self, record):
        return words.explained(*words.event_reason(record.kind, record.reason))

    def render_actor(self, record):
        return event_actor(record)

    def value_reason(self, record):
        return words.event_reason(record.kind, record.reason)[0]
