"""The chargeback credit for lost work (issue 37 part 4): where a group's policy sets
``credit_lost_work``, the GPU-hours its preempted runs lost in the month (stored on each preemption's
event, docs/engine.md "Lost work") are credited back at the GPU type's price in effect at the
preemption: one line on the statement, "credit for lost work". Each preemption is credited once,
through the one usage interval of the run it ended (the task's last that started before it), and
the credit never exceeds the statement's total cost, so the total after it is never negative. A
member's statement credits only their own work, as it counts only their own use."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import Exists, F, OuterRef, Q

from apps.accounts.models import Group
from apps.accounts.selectors import subtree_ids
from apps.core.numbers import money
from apps.ledger.models import UsageInterval
from apps.policies.models import ResourcePolicy
from apps.pricing.selectors import Segment


@dataclass(frozen=True)
class LostCredit:
    gpu_hours: Decimal  # lost by preemptions of work of the crediting policies in the month
    amount: Decimal  # what is credited, at most the statement's total cost
    unpriced_hours: Decimal  # of those, lost on GPU types without a price: not credited


def lost_credit(
    group: Group,
    start: datetime,
    end: datetime,
    segments: list[Segment],
    cost: Fraction,
    where: Q | None = None,
):
    """The credit of ``group``'s subtree in [start, end) at ``segments``' prices, capped at ``cost``
    (the statement's total); None when no policy of the subtree credits lost work. ``where`` narrows
    the runs to those the statement counts (a member's statement: their own work)."""
    subtree = subtree_ids([group.pk])
    if not ResourcePolicy.objects.filter(group_id__in=subtree, credit_lost_work=True).exists():
        return None
    # The run a preemption ended: the task's last interval that started before it (its end may be
    # earlier than the event: a lost worker's run ends at its last heartbeat).
    later = UsageInterval.objects.filter(
        task=OuterRef("task"), start__gt=OuterRef("start"), start__lt=OuterRef("task__events__at")
    )
    rows = UsageInterval.objects.filter(
        where or Q(),
        ~Exists(later),
        group_id__in=subtree,
        policy__credit_lost_work=True,
        task__events__kind="preempted",
        task__events__at__gte=start,
        task__events__at__lt=end,
        start__lt=F("task__events__at"),
    ).values_list("gpu_type_id", "task__events__at", "task__events__lost_gpu_hours")
    found = list(rows)
    total, unpriced, credit = Decimal(0), Decimal(0), Fraction(0)
    for gpu_type, at, lost in found:
        lost = lost or Decimal(0)
        total += lost
        price = _price(segments, gpu_type, at)
        if price is None:
            unpriced += lost
        else:
            credit += Fraction(lost) * Fraction(price)
    return LostCredit(total, money(min(credit, max(cost, Fraction(0)))), unpriced)


def _price(segments: list[Segment], gpu_type: int, at: datetime) -> Decimal | None:
    for s in segments:
        if s.gpu_type_id == gpu_type and s.start <= at < s.end:
            return s.per_gpu_hour
    return None
