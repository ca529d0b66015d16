"""Lost work per group and reason: the GPU-hours the preemptions of a period lost (each stored on
its ``preempted`` event by ``apps.tasks.services.checkpoints``), for a group's subtree."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Sum

from apps.accounts.models import Group
from apps.accounts.selectors import subtree_ids
from apps.tasks.models import TaskEvent


@dataclass(frozen=True)
class LostLine:
    group: str  # slug
    reason: str
    preemptions: int
    gpu_hours: Decimal
    name: str = ""  # the group's name


def lost_work(group: Group, start: datetime, end: datetime) -> list[LostLine]:
    """Per group of the subtree (its own work) and reason, the preemptions in [start, end) and the
    GPU-hours they lost, in group slug then reason order; one query."""
    rows = (
        TaskEvent.objects.filter(
            kind=TaskEvent.Kind.PREEMPTED,
            at__gte=start,
            at__lt=end,
            task__compute_resource__policy__group_id__in=subtree_ids([group.pk]),
        )
        .values_list(
            "task__compute_resource__policy__group__slug",
            "reason",
            "task__compute_resource__policy__group__name",
        )
        .annotate(n=Count("pk"), lost=Sum("lost_gpu_hours"))
        .order_by("task__compute_resource__policy__group__slug", "reason")
    )
    return [LostLine(slug, reason, n, lost or Decimal(0), name) for slug, reason, name, n, lost in rows]


def by_reason(lines: list[LostLine]) -> dict[str, Decimal]:
    """The subtree's lost GPU-hours per reason."""
    total: dict[str, Decimal] = {}
    for line in lines:
        total[line.reason] = total.get(line.reason, Decimal(0)) + line.gpu_hours
    return dict(sorted(total.items()))
