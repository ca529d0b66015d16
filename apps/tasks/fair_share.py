"""Each team's fair share of the GPUs its group borrows, for the pages, the metrics and the API
(``klique status``): a read-only selector that assembles the inputs of
``apps.engine.core.fair.fair_shares`` (the one owner of the split) from the live estate.

Only the children of a parent that lends ``"fair"`` have a fair share. For each such parent:

- a child's use is the GPUs (GPUs x nodes) of the placed and running work of its subtree (not
  what is being stopped, as in the pass), its waiting GPUs those of its subtree's queued tasks;
- what the children share is what they borrow now, plus the idle GPUs of the estate the parent may
  still take: ``sum(max(0, use - reservation)) + min(idle, parent's limit - parent's use)``, idle
  being the capacity of the enabled pools less their use;
- each child is capped at ``min(limit - reservation, max(0, use + waiting - reservation))`` and
  weighted by its ``over_quota_weight``;
- as in the pass, parents nearest the root go first, and a fair child that lends fairly in turn
  shares out at most its own share (its limit taken as ``reservation + share``).

A fixed number of queries whatever the size of the estate. It lives in the work layer, the lowest
that reads tasks, policies and pools, so that the task API below the engine can show it too."""

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count

from apps.core.gpus import MILLI
from apps.engine.core.fair import Claim, fair_shares
from apps.policies.models import ResourcePolicy
from apps.policies.selectors import parent_policy_ids, subtree_sums
from apps.pools.models import Pool
from apps.pools.selectors import daemon_gpus, effective_capacity
from apps.tasks.models import Task

# What the pass counts as use: work being stopped has given its GPUs back already.
RUNNING = (Task.State.PLACED, Task.State.RUNNING)


@dataclass(frozen=True)
class FairShare:
    """A child of a fair-lending parent: the GPUs it borrows (uses above its reservation) and its
    fair share of the borrowed GPUs, both in GPUs."""

    policy_id: int
    parent_id: int
    borrowed: Decimal
    share: Decimal

    @property
    def above(self) -> bool:
        """It holds more than its fair share: a sibling below its own may reclaim from it."""
        return self.borrowed > self.share


def _milli(gpus) -> int:
    return int(Decimal(gpus) * MILLI)


def _gpus(milli: int) -> Decimal:
    return Decimal(milli) / MILLI


def _depth(pk: int, parents: dict[int, int | None]) -> int:
    depth, node = 0, parents.get(pk)
    while node is not None and depth <= len(parents):
        depth, node = depth + 1, parents.get(node)
    return depth


def _sizes(states) -> list[tuple[int, int | None, int]]:
    """(policy id, pool id, milli-GPUs) of the tasks in ``states``, summed by policy and pool."""
    rows = (
        Task.objects.filter(state__in=states)
        .values("compute_resource__policy_id", "pool_id", "gpus", "nodes")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return [
        (row["compute_resource__policy_id"], row["pool_id"], _milli(row["gpus"]) * row["nodes"] * row["n"])
        for row in rows
    ]


def _per(rows, index: int) -> dict[int, int]:
    total: dict[int, int] = defaultdict(int)
    for row in rows:
        if row[index] is not None:
            total[row[index]] += row[2]
    return total


def _idle(in_use: dict[int, int]) -> int:
    """Milli-GPUs free in the enabled pools, at the capacity the engine places against."""
    daemons = daemon_gpus()
    idle = 0
    for pk, declared, cloud in Pool.objects.filter(enabled=True).values_list("pk", "capacity", "cloud"):
        if cloud is None and pk in daemons:
            if daemons[pk] is None:
                continue  # every daemon lost: out of service
            declared = effective_capacity(declared, daemons[pk])
        idle += max(0, _milli(declared) - in_use[pk])
    return idle


def fair_shares_now(parent_ids: set[int] | None = None) -> dict[int, FairShare]:
    """Child policy id -> its fair share, for every child of a parent lending "fair" (of the
    parents in ``parent_ids`` when given)."""
    parents = parent_policy_ids()
    fair = ResourcePolicy.objects.filter(lending=ResourcePolicy.Lending.FAIR)
    fair_ids = set(fair.values_list("pk", flat=True))
    if not any(parents.get(pk) in fair_ids for pk in parents):
        return {}
    policies = {
        row["pk"]: row
        for row in ResourcePolicy.objects.values("pk", "reservation", "limit", "over_quota_weight")
    }
    running = _sizes(RUNNING)
    use = subtree_sums(_per(running, 0), parents)
    waiting = subtree_sums(_per(_sizes([Task.State.QUEUED]), 0), parents)
    idle = _idle(_per(running, 1))
    children: dict[int, list[int]] = defaultdict(list)
    for pk, parent in sorted(parents.items()):
        if parent in fair_ids:
            children[parent].append(pk)
    top = {pk: _milli(row["limit"]) for pk, row in policies.items()}
    result = {}
    for parent in sorted(children, key=lambda pk: (_depth(pk, parents), pk)):
        kids = children[parent]
        claims, borrowed = [], []
        for pk in kids:
            row = policies[pk]
            reservation, limit = _milli(row["reservation"]), _milli(row["limit"])
            borrowed.append(max(0, use[pk] - reservation))
            cap = min(max(0, limit - reservation), max(0, use[pk] + waiting[pk] - reservation))
            claims.append(Claim(weight=_milli(row["over_quota_weight"]), cap=cap))
        shares = fair_shares(sum(borrowed) + max(0, min(top[parent] - use[parent], idle)), claims)
        for pk, held, share in zip(kids, borrowed, shares, strict=True):
            top[pk] = min(top[pk], _milli(policies[pk]["reservation"]) + share)
            if parent_ids is None or parent in parent_ids:
                result[pk] = FairShare(pk, parent, _gpus(held), _gpus(share))
    return result
