"""Read the guarantee figures of a group's reservation over a period (``apps.tasks.guarantees``)
in two queries: its placements with what the group held at each, and their tasks' events."""

from datetime import datetime
from decimal import Decimal

from django.db.models import DecimalField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from apps.ledger.models import UsageInterval
from apps.tasks import guarantees
from apps.tasks.models import TaskEvent

KINDS = (
    TaskEvent.Kind.SUBMITTED,
    TaskEvent.Kind.REQUEUED,
    TaskEvent.Kind.STARTED,
    TaskEvent.Kind.VERDICT,
)


def _held():
    """The GPUs of the policy's other intervals open when the outer one opened (those opened in
    the same pass count when their id is lower: the pass placed them first)."""
    opened = OuterRef("start")
    others = (
        UsageInterval.objects.filter(policy=OuterRef("policy"), start__lte=opened)
        .filter(Q(end__isnull=True) | Q(end__gt=opened))
        .filter(Q(start__lt=opened) | Q(pk__lt=OuterRef("pk")))
        .order_by()
        .values("policy")
        .annotate(total=Sum("gpus"))
        .values("total")
    )
    zero = Value(Decimal(0), output_field=DecimalField())
    return Coalesce(Subquery(others, output_field=DecimalField()), zero)


def guarantees_of(policies, start: datetime, end: datetime) -> dict[int, guarantees.Guarantee]:
    """The figures of each policy's group, by policy id, for the runs that started in [start, end)."""
    policies = list(policies)
    intervals = UsageInterval.objects.filter(policy__in=policies, start__lt=end).filter(
        Q(end__isnull=True) | Q(end__gte=start)
    )
    placements: dict[int, list] = {policy.pk: [] for policy in policies}
    rows = intervals.annotate(held=_held()).order_by().values("policy_id", "task_id", "start", "gpus", "held")
    for row in rows:
        placements[row["policy_id"]].append(
            guarantees.Placement(row["task_id"], row["start"], row["gpus"], row["held"])
        )
    events: dict[int, list] = {}
    found = TaskEvent.objects.filter(
        task__in=intervals.order_by().values("task_id"), kind__in=KINDS, at__lt=end
    )
    for task, at, kind, reason in found.order_by().values_list("task_id", "at", "kind", "reason"):
        events.setdefault(task, []).append(guarantees.Event(task, at, kind, reason))
    result = {}
    for policy in policies:
        own = placements[policy.pk]
        mine = [event for task in {p.task for p in own} for event in events.get(task, ())]
        runs = guarantees.runs(own, mine, policy.reservation, policy.guarantee_start_s)
        in_period = [run for run in runs if start <= run.started_at < end]
        result[policy.pk] = guarantees.measure(in_period, policy.guarantee_start_s)
    return result


def group_guarantee(policy, start: datetime, end: datetime) -> guarantees.Guarantee:
    """The figures of ``policy``'s group for the runs that started in [start, end)."""
    return guarantees_of([policy], start, end)[policy.pk]
