"""Task dependencies (``after_ok``, ``after_any``): the checks at submit and what a task's end does
to the tasks that run after it. The one owner of the rule; every channel submits through
``apps.tasks.services.submission`` and every end goes through ``apps.tasks.services.lifecycle``.

- A task may run after tasks of the same user (an agent's: of its owner), named by id; a bulk
  submission may also name an earlier item of the same request (``{"item": 0}``). Unknown ids,
  another user's tasks, a later item (so no cycle can be made) and a task listed twice are refused.
- ``waits_on`` counts the dependencies that have not ended; the engine places a task only at 0.
- When a dependency ends: an ``after_any`` link is satisfied; an ``after_ok`` link is satisfied when
  it succeeded, and otherwise the waiting task is canceled (reason ``dependency_failed``), and so,
  in turn, are the tasks that run after it with ``after_ok``.
- A dependency that has already ended when the task is submitted counts as above at once: a
  satisfied one is recorded and not waited for; an ``after_ok`` on a task that did not succeed is
  refused (the task could never run).

Submission locks the tasks it names (``FOR NO KEY UPDATE``) until it commits, and every end locks
the ending task's row, so an end can never slip between the check and the new task's links; an
end reads the links after its own update of that row (one index probe on ``needs``).
"""

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db.models import Case, F, Value, When
from django.db.models.functions import Greatest

from apps.tasks.models import Task, TaskDependency, TaskEvent

KINDS = (TaskDependency.Kind.AFTER_OK, TaskDependency.Kind.AFTER_ANY)
MAX_DEPENDENCIES = 100  # per task, both kinds together


class Needs:
    """A checked task's dependencies: ``tasks`` ((existing task, kind) pairs) and ``items``
    ((index of an earlier item of the same bulk request, kind) pairs)."""

    def __init__(self):
        self.tasks: list[tuple[Task, str]] = []
        self.items: list[tuple[int, str]] = []

    def __bool__(self) -> bool:
        return bool(self.tasks or self.items)

    def unended(self) -> int:
        return len(self.items) + sum(1 for task, _ in self.tasks if task.state not in Task.FINAL_STATES)


def _entries(field: str, value) -> list:
    if value is None or value == "":
        return []
    if not isinstance(value, list | tuple):
        raise ValidationError({field: "Give a list of task ids."})
    return list(value)


def _reference(field: str, entry, index: int | None):
    """A task id (int) or an earlier item's index (("item", i))."""
    if isinstance(entry, dict) and set(entry) == {"item"}:
        item = entry["item"]
        if index is None:
            raise ValidationError({field: "Name earlier items ({'item': n}) only in a bulk submission."})
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < index:
            raise ValidationError(
                {field: f"Item {item!r} is not an earlier item of this request (this is item {index})."}
            )
        return ("item", item)
    if isinstance(entry, str) and entry.isdigit():
        entry = int(entry)
    if isinstance(entry, bool) or not isinstance(entry, int) or entry < 1:
        raise ValidationError({field: f"{entry!r} is not a task id."})
    return entry


def check(user, after_ok=None, after_any=None, *, index: int | None = None) -> Needs:
    """The dependencies a submission by ``user`` asks for, checked and locked (``index``: the
    item's place in a bulk request, which may name earlier items)."""
    asked: list[tuple[object, str]] = []  # (task id or ("item", n), kind: also the field)
    for kind, value in ((TaskDependency.Kind.AFTER_OK, after_ok), (TaskDependency.Kind.AFTER_ANY, after_any)):
        asked += [(_reference(kind, entry, index), kind) for entry in _entries(kind, value)]
    needs = Needs()
    if not asked:
        return needs
    if len(asked) > MAX_DEPENDENCIES:
        raise ValidationError({asked[0][1]: f"At most {MAX_DEPENDENCIES} dependencies per task."})
    seen = set()
    for ref, kind in asked:
        if ref in seen:
            shown = f"item {ref[1]}" if isinstance(ref, tuple) else f"task {ref}"
            raise ValidationError({kind: f"{shown.capitalize()} is named twice."})
        seen.add(ref)
    ids = [ref for ref, _ in asked if isinstance(ref, int)]
    found = {
        task.pk: task
        for task in Task.objects.select_for_update(no_key=True).filter(pk__in=ids, user=user).order_by("pk")
    }
    for ref, kind in asked:
        if isinstance(ref, tuple):
            needs.items.append((ref[1], kind))
            continue
        task = found.get(ref)
        if task is None:
            raise ValidationError({kind: f"Task {ref} is unknown (or not yours)."})
        if kind == TaskDependency.Kind.AFTER_OK and task.state in Task.FINAL_STATES:
            if task.state != Task.State.SUCCEEDED:
                ended = task.get_state_display().lower()
                raise ValidationError({kind: f"Task {ref} ended {ended}, so this task could never run."})
        needs.tasks.append((task, kind))
    return needs


def link(created: list[Task], needs: list[Needs]) -> dict[int, list[int]]:
    """Write the links of newly created tasks (``needs[i]`` for ``created[i]``; items name earlier
    entries of ``created``); the dependency ids of each new task."""
    links, after = [], {}
    for task, wanted in zip(created, needs, strict=True):
        mine = [TaskDependency(task=task, needs=needed, kind=kind) for needed, kind in wanted.tasks]
        mine += [TaskDependency(task=task, needs=created[item], kind=kind) for item, kind in wanted.items]
        if mine:
            after[task.pk] = [link.needs_id for link in mine]
            links += mine
    if not links:
        return after
    TaskDependency.objects.bulk_create(links)
    return after


def ended(tasks: Iterable[Task], at) -> None:
    """Tasks reached their final states (in the caller's transaction): release or cancel the
    tasks that run after them."""
    ending = {task.pk: task.state for task in tasks}
    while ending:
        links = list(
            TaskDependency.objects.filter(needs_id__in=list(ending), task__state=Task.State.QUEUED)
            .select_related("task")
            .order_by("task_id", "needs_id")
        )
        if not links:
            return
        failed: dict[int, tuple[Task, int, str]] = {}
        released: dict[int, int] = {}
        for dependency in links:
            outcome = ending[dependency.needs_id]
            if dependency.kind == TaskDependency.Kind.AFTER_OK and outcome != Task.State.SUCCEEDED:
                failed.setdefault(dependency.task_id, (dependency.task, dependency.needs_id, outcome))
            else:
                released[dependency.task_id] = released.get(dependency.task_id, 0) + 1
        by_count: dict[int, list[int]] = {}
        for task_id, count in released.items():
            if task_id not in failed:
                by_count.setdefault(count, []).append(task_id)
        for count, task_ids in by_count.items():
            _release(task_ids, count, at)
        ending = _cancel(list(failed.values()), at)


def _release(task_ids: list[int], count: int, at) -> None:
    """Count ``count`` dependencies of each task ended; at 0 a task joins its queue now
    (``released_at``)."""
    joined = Case(When(waits_on__lte=count, then=Value(at)), default=F("released_at"))
    left = Greatest(F("waits_on") - count, 0)
    Task.objects.filter(pk__in=task_ids).update(waits_on=left, released_at=joined)


def _cancel(failed: list[tuple[Task, int, str]], at) -> dict[int, str]:
    """Cancel waiting tasks whose ``after_ok`` dependency did not succeed; their ids for the next
    round (their own dependants)."""
    canceled = {}
    for task, needed, outcome in failed:
        task.state, task.ended_at, task.verdict = Task.State.CANCELED, at, {}
        task.stop_reason = Task.StopReason.DEPENDENCY_FAILED
        task.save(update_fields=["state", "ended_at", "verdict", "stop_reason"])
        TaskEvent.objects.create(
            task=task,
            at=at,
            kind=TaskEvent.Kind.CANCELED,
            reason=Task.StopReason.DEPENDENCY_FAILED,
            detail={"after": needed, "ended": outcome},
        )
        canceled[task.pk] = task.state
    return canceled
