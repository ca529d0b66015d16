"""Work lost to preemptions on the team and department pages: ``apps.tasks.lost_work``'s lines in
words (``klique/numbers.py``, the stop reasons' labels)."""

from datetime import datetime

from apps.accounts.models import Group
from apps.tasks.lost_work import lost_work
from apps.tasks.models import Task
from klique import numbers


def lost_rows(group: Group, start: datetime, end: datetime) -> list[dict]:
    """The work the group's subtree lost to preemptions in [start, end), per group and reason."""
    lines = lost_work(group, start, end)
    if not lines:
        return []
    names = dict(Group.objects.filter(slug__in={line.group for line in lines}).values_list("slug", "name"))
    reasons = dict(Task.StopReason.choices)
    return [
        {
            "group": names.get(line.group, line.group),
            "reason": reasons.get(line.reason, line.reason),
            "preemptions": numbers.count(line.preemptions),
            "gpu_hours": numbers.hours(line.gpu_hours),
        }
        for line in lines
    ]
