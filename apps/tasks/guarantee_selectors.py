"""Read the guarantee figures of a group's reservation over a period (``apps.tasks.guarantees``)
in three queries: its placements with what the group held at each, the audited changes of its
reservation (each run is judged by the reservation of its moment), and their tasks' events; one more
for the current period: the work waiting now (what each group holds now is in the placements)."""

from datetime import datetime
from decimal import Decimal

from django.db.models import DecimalField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.ledger.models import UsageInterval
from apps.policies.models import PolicyChange
from apps.tasks import guarantees
from apps.tasks.models import Task, TaskEvent

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


def _waiting(policies, held: dict[int, Decimal], now: datetime) -> dict[int, list[guarantees.Miss]]:
    """The misses of work waiting now, by policy id: tasks in their queue (not held back by
    dependencies) since their last queue entry; ``held``: the GPUs each policy holds now."""
    entry = (
        TaskEvent.objects.filter(task=OuterRef("pk"), kind__in=guarantees.QUEUE_ENTRIES)
        .order_by("-at")
        .values("at")[:1]
    )
    rows = (
        Task.objects.filter(state=Task.State.QUEUED, waits_on=0, compute_resource__policy__in=policies)
        .annotate(queued_at=Subquery(entry))
        .order_by()
        .values_list("compute_resource__policy_id", "pk", "queued_at", "gpus", "nodes", "verdict")
    )
    waiting: dict[int, list[guarantees.Waiting]] = {}
    for policy, task, queued_at, gpus, nodes, verdict in rows:
        if queued_at is not None:
            cause = (verdict or {}).get("rule", "")
            waiting.setdefault(policy, []).append(guarantees.Waiting(task, queued_at, gpus * nodes, cause))
    return {
        policy.pk: guarantees.waiting_misses(
            waiting.get(policy.pk, ()),
            held.get(policy.pk, Decimal(0)),
            policy.reservation,
            now,
            policy.guarantee_start_s,
        )
        for policy in policies
    }


def reservation_changes(policies, since: datetime) -> dict[int, list[tuple[datetime, Decimal]]]:
    """(when, reservation before) of each audited change of each policy's reservation after
    ``since``, in time order."""
    found: dict[int, list] = {}
    rows = (
        PolicyChange.objects.filter(policy__in=policies, at__gt=since, changes__has_key="reservation")
        .order_by("at", "pk")
        .values_list("policy_id", "at", "changes")
    )
    for policy, at, changes in rows:
        found.setdefault(policy, []).append((at, Decimal(changes["reservation"][0] or 0)))
    return found


def guarantees_of(policies, start: datetime, end: datetime) -> dict[int, guarantees.Guarantee]:
    """The figures of each policy's group, by policy id, for the runs that started in [start, end)
    and, when the period holds now, the work waiting since its queue entry in it."""
    policies = list(policies)
    intervals = UsageInterval.objects.filter(policy__in=policies, start__lt=end).filter(
        Q(end__isnull=True) | Q(end__gte=start)
    )
    placements: dict[int, list] = {policy.pk: [] for policy in policies}
    rows = list(
        intervals.annotate(held=_held())
        .order_by()
        .values("policy_id", "task_id", "start", "end", "gpus", "held")
    )
    changes = reservation_changes(policies, min((row["start"] for row in rows), default=start))
    current = {policy.pk: policy.reservation for policy in policies}
    for row in rows:
        policy = row["policy_id"]
        reserved = guarantees.reservation_at(current[policy], changes.get(policy, ()), row["start"])
        placements[policy].append(
            guarantees.Placement(row["task_id"], row["start"], row["gpus"], row["held"], reserved)
        )
    events: dict[int, list] = {}
    found = TaskEvent.objects.filter(
        task__in=intervals.order_by().values("task_id"), kind__in=KINDS, at__lt=end
    )
    for task, at, kind, reason in found.order_by().values_list("task_id", "at", "kind", "reason"):
        events.setdefault(task, []).append(guarantees.Event(task, at, kind, reason))
    now = timezone.now()
    waiting = {}
    if start <= now < end:
        held: dict[int, Decimal] = {}
        for row in rows:
            if row["end"] is None:
                held[row["policy_id"]] = held.get(row["policy_id"], Decimal(0)) + row["gpus"]
        waiting = _waiting(policies, held, now)
    result = {}
    for policy in policies:
        own = placements[policy.pk]
        mine = [event for task in {p.task for p in own} for event in events.get(task, ())]
        runs = guarantees.runs(own, mine, policy.reservation, policy.guarantee_start_s)
        in_period = [run for run in runs if start <= run.started_at < end]
        result[policy.pk] = guarantees.measure(
            in_period, policy.guarantee_start_s, waiting.get(policy.pk, ())
        )
    return result


def group_guarantee(policy, start: datetime, end: datetime) -> guarantees.Guarantee:
    """The figures of ``policy``'s group for the runs that started in [start, end)."""
    return guarantees_of([policy], start, end)[policy.pk]
