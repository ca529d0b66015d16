"""The portal's tables (django-tables2): sortable, paginated, exported as CSV by the views.

Each table has a ``prefix`` so that several can sit on one page, and ``actions`` columns (forms)
are left out of the exports."""

from decimal import Decimal

import django_tables2 as tables
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from apps.accounts.models import Notification
from apps.cloud.models import CloudNode
from apps.engine.models import PassRecord
from apps.policies.models import PolicyChange
from apps.policies.rules import fmt
from apps.portal import words
from apps.tasks.models import Task, TaskEvent
from klique import numbers

NUM = {"td": {"class": "num"}, "th": {"class": "num"}}

# Figures as a person reads them: klique/numbers.py owns the rules.
gpus = numbers.gpus
hours = numbers.hours
hours_left = numbers.hours_left
money = numbers.money
exact_gpus, exact_hours, exact_money = numbers.exact_gpus, numbers.exact_hours, numbers.exact_money


def task_gpus(task: Task) -> str:
    """A task's size: its GPUs, or on several nodes its nodes times its GPUs per node ("2 x 4")."""
    return f"{task.nodes} x {gpus(task.gpus)}" if task.nodes > 1 else gpus(task.gpus)


def when(value) -> str:
    return f"{value:%Y-%m-%d %H:%M} UTC" if value else "—"


def run_out(status) -> str:
    """When a time budget runs out at the current burn rate. A run-out at or after the period's
    reset is no run-out: the budget lasts the period, and the reset is shown instead."""
    return when(status.projected_run_out) if status.runs_out_in_period else status.run_out_text()


def cap_status(status) -> str:
    """A cloud spend cap in words: reached (no new cloud node for its scope until the reset) or not."""
    if status.reached:
        return f"cap reached until {when(status.resets_at)}"
    if status.unpriced_node_hours:
        unpriced = f"{hours(status.unpriced_node_hours)} node-hours without a price in {status.currency}"
        return f"within cap ({unpriced} not counted)"
    return "within cap"


class GpuColumn(tables.Column):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, attrs=NUM, **kwargs)

    def render(self, value):
        return gpus(value)

    def value(self, value):
        return exact_gpus(value)


class HoursColumn(tables.Column):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, attrs=NUM, **kwargs)

    def render(self, value):
        return hours(value)

    def value(self, value):
        return exact_hours(value)


class WindowsColumn(tables.Column):
    """A time budget figure of the row's policy, one line per window (``record.status.windows``);
    in exports the lines are joined with "; ", at full precision when ``exported`` is given."""

    def __init__(self, text, *args, number: bool = True, exported=None, **kwargs):
        self.text, self.exported = text, exported or text
        super().__init__(*args, attrs=NUM if number else {}, empty_values=(), **kwargs)

    def lines(self, record, text=None) -> list[str]:
        return [(text or self.text)(w) for w in (record.status.windows or (record.status,))]

    def render(self, record):
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in self.lines(record)))

    def value(self, record):
        return "; ".join(self.lines(record, self.exported))


class WhenColumn(tables.Column):
    def render(self, value):
        return when(value)


class Grid:
    attrs = {"class": "grid"}


def actions_column(template: str, verbose_name: str = "") -> tables.TemplateColumn:
    """A column of forms (cancel, remove, set): never sorted, never exported."""
    return tables.TemplateColumn(
        template_name=template, verbose_name=verbose_name, orderable=False, exclude_from_export=True
    )


# A developer's work.


def work_state(task: Task) -> str:
    """The task in the developer's words: waiting, requeued, starting, running, stopping or how it ended."""
    if task.state == Task.State.QUEUED:
        return "requeued" if task.preemption_count else "waiting"
    if task.state == Task.State.PLACED:
        return "starting"
    return task.get_state_display().lower()


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
        if record.exit_code is not None:
            return f"exit code {record.exit_code}"
        return "—"

    def render_since(self, record):
        return when(record.started_at or record.placed_at) if record.state in Task.ACTIVE_STATES else "—"

    def render_borrowed(self, record):
        share = self.borrowed_gpus.get(record.pk)
        return gpus(share) if share else ("no" if record.state in Task.ACTIVE_STATES else "—")


def profile_label(profile) -> str:
    """The profile's name with a badge per constraint on its pools ("sovereign: DE", a minimum GPU
    memory or generation)."""
    badge = '<span class="badge constraint">{}</span>'
    badges = format_html_join(" ", badge, ((label,) for label in profile.constraints))
    return format_html("{} {}", profile.name, badges) if profile.constraints else profile.name


class ResourceTable(tables.Table):
    """Where a developer may submit, marked when a used-up budget holds it."""

    name = tables.Column(verbose_name="Compute resource", accessor="0__name")
    group = tables.Column(verbose_name="Group", accessor="0__policy__group__name")
    profile = tables.Column(verbose_name="Profile", accessor="0__profile__name")
    size = tables.Column(verbose_name="GPU size", accessor="0__profile__gpus", attrs=NUM)
    budget = tables.Column(verbose_name="Budget", accessor="1", empty_values=(), orderable=False)

    class Meta(Grid):
        prefix = "resources-"
        empty_text = "You are in no group with a compute resource yet: ask your team lead."

    def render_size(self, value, record):
        return "set per task" if record[0].profile.size_from_task else gpus(value)

    def render_profile(self, record):
        return profile_label(record[0].profile)

    def value_profile(self, value):
        return value

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


def safe_link(link: str) -> str:
    """A notification's link when it is a path on this site, else ''."""
    return link if link.startswith("/") and not link.startswith(("//", "/\\")) else ""


def notification_message(notification: Notification) -> str:
    link = safe_link(notification.link or "")
    if not link:
        return notification.message
    return format_html('<a href="{}">{}</a>', link, notification.message)


# IT.


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
        return f"{value:.1f}"


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


class EventTable(tables.Table):
    at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="At (UTC)")
    task = tables.Column(linkify=("portal:task", {"pk": tables.A("task_id")}), order_by="task_id")
    compute_resource = tables.Column(
        verbose_name="Compute resource", accessor="task__compute_resource__name", orderable=False
    )
    kind = tables.Column()
    reason = tables.Column()
    pool = tables.Column(order_by="pool__name")
    actor = tables.Column(verbose_name="By", default="engine")

    class Meta(Grid):
        model = TaskEvent
        fields = []
        prefix = "events-"
        empty_text = "No events."

    def render_reason(self, record):
        return words.explained(*words.event_reason(record.kind, record.reason))

    def value_reason(self, record):
        return words.event_reason(record.kind, record.reason)[0]


# A department and a team.


class QuotaChangeTable(tables.Table):
    at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="At (UTC)")
    group = tables.Column(
        verbose_name="Group", accessor="policy__group__name", order_by="policy__group__name"
    )
    actor = tables.Column(verbose_name="By", default="—")
    changes = tables.Column(orderable=False)
    via = tables.Column()

    class Meta(Grid):
        model = PolicyChange
        fields = []
        prefix = "changes-"
        empty_text = "No quota changes yet."

    def render_changes(self, value):
        return "; ".join(
            f"{words.policy_field(field)}: {_shown(old, field)} → {_shown(new, field)}"
            for field, (old, new) in value.items()
        )


def _shown(value, field: str = "") -> str:
    if value is None or (value == "" and field == "further_budgets"):
        return "none"
    if value == "":
        return "no period"
    try:
        return fmt(Decimal(value))
    except ArithmeticError:
        return value


class MemberTable(tables.Table):
    user = tables.Column(accessor="membership__user__username", verbose_name="Member")
    name = tables.Column(verbose_name="Name", accessor="membership__user__get_full_name", orderable=False)
    role = tables.Column(verbose_name="Role", accessor="membership__get_role_display", orderable=False)
    gpus_in_use = GpuColumn(verbose_name="GPUs in use")
    gpu_hours = HoursColumn(verbose_name="GPU-hours in the period")
    waiting = tables.Column(attrs=NUM)
    running = tables.Column(verbose_name="Placed or running", attrs=NUM)
    actions = actions_column("portal/_member_actions.html")

    class Meta(Grid):
        prefix = "members-"
        empty_text = "No members yet."


class ProjectTable(tables.Table):
    name = tables.Column(verbose_name="Project", accessor="project__name")
    priority = tables.Column(verbose_name="Priority", accessor="project__priority", attrs=NUM)
    gpu_hours = HoursColumn(verbose_name="GPU-hours in the period")
    waiting = tables.Column(attrs=NUM)
    actions = actions_column("portal/_project_actions.html", "Set priority")

    class Meta(Grid):
        prefix = "projects-"
        empty_text = "No projects in this group."


# Leadership.


class CloudCapTable(tables.Table):
    """Leadership's cloud spend caps against this month's cloud spend."""

    scope = tables.Column(verbose_name="Scope")
    group = tables.Column(verbose_name="Group")
    amount = tables.Column(verbose_name="Cap a month", attrs=NUM)
    spent = tables.Column(verbose_name="Spent this month", attrs=NUM)
    share = tables.Column(verbose_name="Spent %", attrs=NUM, empty_values=())
    status = tables.Column(verbose_name="Status", accessor="reached", orderable=False)
    resets_at = WhenColumn(verbose_name="Resets")
    actions = actions_column("portal/_cap_actions.html")

    class Meta(Grid):
        prefix = "caps-"
        empty_text = "No cloud spend cap: cloud pools grow up to their types' maximum."

    def render_amount(self, value, record):
        return money(value, record.currency)

    def value_amount(self, value):
        return exact_money(value)

    def render_spent(self, value, record):
        return money(value, record.currency)

    def value_spent(self, value):
        return exact_money(value)

    def render_share(self, value):
        return "—" if value is None else f"{value * 100:.0f}"

    def render_status(self, record):
        text = cap_status(record)
        return format_html('<span class="badge over">{}</span>', text) if record.reached else text

    def value_status(self, record):
        return cap_status(record)
