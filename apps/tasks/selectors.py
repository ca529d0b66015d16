"""Reads of tasks and queues."""

from dataclasses import dataclass, field

from django.db import connection
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Q, Value, Window
from django.db.models.functions import Coalesce

from apps.accounts.models import User
from apps.accounts.selectors import cancellable_group_ids, managed_group_ids
from apps.tasks.models import Schedule, Task, TaskDependency, TaskEvent

# Where a task is in the portal's words (a developer's "My work"), beside the model's states.
WORK_STATES = {
    "waiting": Q(state=Task.State.QUEUED, preemption_count=0),
    "requeued": Q(state=Task.State.QUEUED, preemption_count__gt=0),
    "running": Q(state__in=Task.ACTIVE_STATES),
    "done": Q(state__in=Task.FINAL_STATES),
}
# What the API's ``state`` filter takes: every model state (``running`` is the model's, exactly),
# then the portal's words that are not one.
STATE_FILTERS = {value: Q(state=value) for value in Task.State.values} | {
    word: condition for word, condition in WORK_STATES.items() if word not in Task.State.values
}


def queue_position(task: Task) -> int | None:
    """1-based place of a waiting task in its compute resource's queue; None when not waiting."""
    return queue_positions([task]).get(task.pk)


# Channels: what each person may see and do through the API, the CLI, the SDK and MCP.


def _in_groups(queryset, user: User, group_ids: set[int] | None, group_path: str, owner_field: str):
    if group_ids is None:
        return queryset
    return queryset.filter(Q(**{owner_field: user}) | Q(**{f"{group_path}__in": group_ids}))


def visible_tasks(user: User):
    """A member sees their own tasks; a team lead, department head, tenant admin, or finance or
    leadership of a business unit also their groups' tasks; the estate's viewers (IT, finance and
    leadership at the organisation's root) every task (``managed_group_ids``)."""
    tasks = Task.objects.select_related(
        "user", "project", "agent", "pool", "compute_resource__policy__group", "compute_resource__profile"
    )
    return _in_groups(tasks, user, managed_group_ids(user), "compute_resource__policy__group_id", "user")


def may_cancel(user: User, task: Task) -> bool:
    """The owner, IT admins, and the heads and leads of the task's group may cancel it."""
    if task.user_id == user.pk:
        return True
    groups = cancellable_group_ids(user)
    return groups is None or task.compute_resource.policy.group_id in groups


QUEUE_SEQ_SPAN = 2**40
DEFAULT_PROJECT_PRIORITY = 100


def with_queue_rank(queryset):
    """Annotate ``queue_rank``: the order of a compute resource's queue. The team lead's project
    priority comes first (lower first; no project counts as the default 100), then the queue seq,
    which a preempted task keeps, so it returns to the front of its project's work."""
    priority = Coalesce(F("project__priority"), Value(DEFAULT_PROJECT_PRIORITY))
    return queryset.annotate(
        queue_rank=ExpressionWrapper(
            priority * QUEUE_SEQ_SPAN + F("queue_seq"), output_field=BigIntegerField()
        )
    )


def queue_positions(tasks) -> dict[int, int]:
    """1-based place of each waiting task in its compute resource's queue (higher priority first,
    then queue rank, as the engine reads it), in one query: the queues of their compute resources
    are ranked once (a window counting the tasks at or before each place), so many tasks of one
    queue cost one pass over it rather than one count each."""
    waiting_ids = [t.pk for t in tasks if t.state == Task.State.QUEUED]
    if not waiting_ids:
        return {}
    resources = {t.compute_resource_id for t in tasks if t.state == Task.State.QUEUED}
    ranked = (
        with_queue_rank(Task.objects.filter(state=Task.State.QUEUED, compute_resource_id__in=resources))
        .annotate(
            task_id=F("pk"),
            place=Window(
                Count("pk"),
                partition_by=F("compute_resource_id"),
                order_by=[F("priority").desc(), F("queue_rank").asc()],
            ),
        )
        .values_list("task_id", "place")
    )
    sql, params = ranked.query.sql_with_params()
    marks = ", ".join(["%s"] * len(waiting_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT task_id, place FROM ({sql}) ranked WHERE task_id IN ({marks})", [*params, *waiting_ids]
        )
        return {pk: place for pk, place in cursor.fetchall()}


def preemption_history(task: Task):
    """The task's preemptions and requeues, oldest first, with their reasons."""
    kinds = [TaskEvent.Kind.PREEMPTED, TaskEvent.Kind.REQUEUED]
    return task.events.filter(kind__in=kinds).select_related("pool").order_by("at", "pk")


def visible_schedules(user: User):
    """Like tasks: the owner's, the managed groups' (``managed_group_ids``), all for the estate's
    viewers."""
    schedules = Schedule.objects.select_related(
        "owner", "project", "compute_resource__policy__group", "compute_resource__profile"
    )
    return _in_groups(schedules, user, managed_group_ids(user), "compute_resource__policy__group_id", "owner")


def multi_node_work():
    """Tasks on several nodes that wait or hold a pool (placed, running, stopping)."""
    return Task.objects.filter(nodes__gt=1, state__in=(Task.State.QUEUED, *Task.ACTIVE_STATES))


def never_fits():
    """Queued tasks whose verdict from the engine's last pass is ``never_fits``: no enabled pool of
    their profile can ever hold them (IT must raise a pool's capacity, enable or add a pool)."""
    return (
        Task.objects.filter(state=Task.State.QUEUED, verdict__rule="never_fits")
        .select_related("compute_resource__policy__group", "compute_resource__profile", "user")
        .order_by("queue_seq")
    )


@dataclass(frozen=True)
class Link:
    """A dependency seen from one end: the other task's id, name and state, and the link's kind."""

    task: int
    kind: str
    state: str
    name: str = ""


@dataclass
class TaskLinks:
    """A task's ``needs`` (the tasks it runs after) and ``dependants`` (the tasks that run after it)."""

    needs: list[Link] = field(default_factory=list)
    dependants: list[Link] = field(default_factory=list)


LINKS_CHUNK = 900  # ids per query, within SQLite's limit of bound parameters


def task_links(task_ids) -> dict[int, TaskLinks]:
    """The dependencies and dependants of each task, with the other tasks' states: two queries per
    ``LINKS_CHUNK`` tasks."""
    ids = list(task_ids)
    found = {pk: TaskLinks() for pk in ids}
    for start in range(0, len(ids), LINKS_CHUNK):
        chunk = ids[start : start + LINKS_CHUNK]
        needs = TaskDependency.objects.filter(task_id__in=chunk).order_by("task_id", "needs_id")
        for task_id, other, kind, state, name in needs.values_list(
            "task_id", "needs_id", "kind", "needs__state", "needs__name"
        ):
            found[task_id].needs.append(Link(other, kind, state, name))
        dependants = TaskDependency.objects.filter(needs_id__in=chunk).order_by("needs_id", "task_id")
        for task_id, other, kind, state, name in dependants.values_list(
            "needs_id", "task_id", "kind", "task__state", "task__name"
        ):
            found[task_id].dependants.append(Link(other, kind, state, name))
    return found
