"""What the portal says about how long and after what work runs: a compute resource's time
limits, and on a task's page its time limit with the time left and run so far, the tasks it runs
after and that run after it (with their states), and its array. Durations in
``klique.numbers.duration``'s words; the rules are ``apps.tasks.services``'."""

from dataclasses import dataclass

from django.db.models import Count

from apps.tasks import selectors
from apps.tasks.models import Task, TaskDependency
from apps.tasks.services.time_limits import left_s, max_time_limit, ran_s, resolve_time_limit
from klique import numbers

KIND_WORDS = {
    TaskDependency.Kind.AFTER_OK: "if it succeeds",
    TaskDependency.Kind.AFTER_ANY: "whatever its end",
}


@dataclass(frozen=True)
class Linked:
    """A task at the other end of a dependency, as its page shows it."""

    id: int
    name: str
    state: str
    kind: str


def limits_text(resource) -> str:
    """A compute resource's time limits in words: "60 min, at most 4 h", or "no limit"."""
    default, most = resolve_time_limit(resource, None), max_time_limit(resource)
    if default is None:
        return "no limit"
    return numbers.duration(default) + (f", at most {numbers.duration(most)}" if most is not None else "")


def time_facts(task: Task, at) -> dict:
    """The time limit ("2 h 30 min" or "none"), the time left (None when ended or without a limit)
    and the running time so far, in words."""
    left = left_s(task, at)
    ended = task.state in Task.FINAL_STATES
    return {
        "limit": numbers.duration(task.time_limit_s) if task.time_limit_s is not None else "none",
        "left": None if left is None or ended else ("reached" if left <= 0 else numbers.duration(left)),
        "ran": numbers.duration(ran_s(task, at)),
    }


def _linked(links) -> list[Linked]:
    return [
        Linked(link.task, link.name, Task.State(link.state).label, KIND_WORDS.get(link.kind, link.kind))
        for link in links
    ]


def dependency_facts(task: Task) -> dict:
    """The tasks it runs after (``needs``) and the tasks that run after it (``dependants``)."""
    links = selectors.task_links([task.pk])[task.pk]
    return {"needs": _linked(links.needs), "dependants": _linked(links.dependants)}


def array_facts(task: Task) -> dict | None:
    """Its array: id, its index, size, cap and how many of its tasks are in each state."""
    if task.array_id is None:
        return None
    counts = (
        Task.objects.filter(array_id=task.array_id).values("state").annotate(n=Count("pk")).order_by("state")
    )
    states = ", ".join(f"{row['n']} {Task.State(row['state']).label.lower()}" for row in counts)
    return {
        "id": task.array_id,
        "index": task.array_index,
        "size": task.array.size,
        "max_running": task.array.max_running,
        "states": states,
    }
