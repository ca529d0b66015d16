"""Work lost to preemptions on the team and department pages: ``apps.tasks.lost_work``'s lines in
words (``klique/numbers.py``, the stop reasons' labels)."""

from datetime import datetime

from apps.accounts.models import Group
from apps.tasks.lost_work import lost_work
from apps.tasks.models import Task
from klique import numbers


def lost_rows(group: Group, start: datetime, end: datetime) -> list[dict]:
    """The work the group's subtree lost to preemptions in [start, end), per group and reason."""
    reasons = dict(Task.StopReason.choices)
    return [
        {
            "group": line.name,
            "reason": reasons.get(line.reason, line.reason),
            "preemptions": numbers.count(line.preemptions),
            "gpu_hours": numbers.hours(line.gpu_hours),
        }
        for line in lost_work(group, start, end)
    ]
