"""Write a pass's decisions back in one transaction: preemptions, placements, verdicts.

Rows are locked and their state checked again, since users, workers and sweeps change tasks
between the load and the apply: a task canceled meanwhile is not placed, work that ended
meanwhile is not preempted. Skipping is always safe; the next pass sees the new state.
"""

import json
from collections import defaultdict
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.fields.json import KT

from apps.accounts.models import Notification
from apps.engine import core
from apps.engine.loader import Loaded
from apps.pools.models import Pool
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent, counted_milli

REASON_WORDS = {
    "reclaim": "its GPUs were reclaimed for another group's reservation",
    "budget": "its group's time budget is used up",
}


@dataclass(frozen=True)
class Applied:
    placed: int
    preempted: int
    verdicts_changed: int


WAITING_FOR_ROOM = {"no_capacity", "behind_higher_priority"}


def verdict_json(verdict: core.Verdict, loaded: Loaded) -> dict:
    """The verdict as stored on the task (without its place in line, which is read live).

    ``key`` identifies the verdict whole, so the applier compares short strings, not documents.
    """
    pools = [loaded.pool_names.get(p, p) for p in verdict.pools]
    group = loaded.group_names.get(verdict.policy, verdict.policy) if verdict.policy else None
    data: dict = {"rule": verdict.rule}
    if pools:
        data["pools"] = pools
    if group:
        data["group"] = group
    if verdict.rule == "no_capacity":
        message = (
            f"No room for its size in its pools ({', '.join(pools)}): their declared capacity is in use."
        )
    elif verdict.rule == "policy_limit":
        message = f"{group} is at its limit: this task would take it above the most GPUs it may hold at once."
    elif verdict.rule == "ancestor_limit":
        message = f"{group}, above this group, is at its limit."
    elif verdict.rule == "budget_start_check":
        # Tenths of an hour: the figures move as the group's work burns budget, and finer ones
        # would rewrite the verdict of every waiting task of the group every few seconds.
        data["hours_left"] = round(verdict.hours_left, 1)
        data["hours_needed"] = round(verdict.hours_needed, 1)
        message = (
            f"The time budget of {group} has {data['hours_left']} h left; starting needs "
            f"{data['hours_needed']} h (the low watermark at the group's rate with this task)."
        )
    elif verdict.rule == "cloud_cap_reached":
        data["reset_at"] = verdict.reset_at.isoformat()
        message = (
            f"Cloud spend cap reached for {group}: no new work goes to {', '.join(pools)} until it resets "
            f"at {verdict.reset_at:%Y-%m-%d %H:%M} UTC."
        )
    elif verdict.rule == "budget_used_up":
        data["reset_at"] = verdict.reset_at.isoformat()
        message = (
            f"The time budget of {group} is used up; it resets at {verdict.reset_at:%Y-%m-%d %H:%M} UTC."
        )
    else:
        message = f"Room in {', '.join(pools)} goes to higher-priority work first."
    data["message"] = message
    rule_class = "room" if verdict.rule in WAITING_FOR_ROOM else verdict.rule
    data["key"] = "|".join(
        str(part)
        for part in (
            rule_class,
            "" if rule_class == "room" else ",".join(pools),
            group or "",
            data.get("hours_left", ""),
            data.get("hours_needed", ""),
            data.get("reset_at", ""),
        )
    )
    return data


def apply(loaded: Loaded, decisions: core.Decisions, now) -> Applied:
    """Write the decisions in one transaction: the caller's (the pass writes its record in the same
    one), or its own."""
    with transaction.atomic(savepoint=False):
        preempted = _preempt(decisions.preemptions, now)
        placed = _place(decisions.placements, now)
        changed = _verdicts(loaded, decisions, now)
    return Applied(placed=placed, preempted=preempted, verdicts_changed=changed)


def _preempt(preemptions, now) -> int:
    if not preemptions:
        return 0
    ids = [int(p.task) for p in preemptions]
    rows = (
        Task.objects.select_for_update()
        .filter(pk__in=ids, state__in=(Task.State.PLACED, Task.State.RUNNING))
        .order_by("pk")
    )
    found = {task.pk: task for task in rows}
    by_reason = defaultdict(list)
    for preemption in preemptions:
        task = found.get(int(preemption.task))
        if task is not None:
            by_reason[preemption.reason].append(task)
    for reason, group in by_reason.items():
        tasks.request_stop_many(group, reason, now)
        Notification.objects.bulk_create(
            Notification(
                user_id=task.user_id,
                kind=Notification.Kind.PREEMPTED,
                link=f"/work/tasks/{task.pk}/",  # the portal's portal:task
                message=_preempted_message(task, reason),
            )
            for task in group
        )
    return sum(len(group) for group in by_reason.values())


def _preempted_message(task: Task, reason: str) -> str:
    """Sent when the stop is requested. A session is never requeued: it ends, and its user may
    start another."""
    if task.kind == Task.Kind.SESSION:
        return f"Session {task} is being stopped and will end: {REASON_WORDS[reason]}."
    return f"Task {task} was preempted and requeued at the front of its queue: {REASON_WORDS[reason]}."


def _place(placements, now) -> int:
    if not placements:
        return 0
    ids = [int(p.task) for p in placements]
    rows = (
        Task.objects.select_for_update(of=("self",))
        .select_related("compute_resource__policy", "compute_resource__profile")
        .filter(pk__in=ids, state=Task.State.QUEUED)
        .order_by("pk")
    )
    found = {task.pk: task for task in rows}
    pools = {str(pool.pk): pool for pool in Pool.objects.all()}
    pairs = [(found[int(p.task)], pools[p.pool]) for p in placements if int(p.task) in found]
    tasks.place_many(pairs, now)
    return len(pairs)


def _verdicts(loaded: Loaded, decisions: core.Decisions, now) -> int:
    """Store the verdict of each group of waiting tasks (one counted size, GPUs x nodes, in one
    compute resource: the core decides per group) on the tasks whose stored verdict differs, and a
    task event for each task whose rule changed (a new figure under the same rule, such as the
    budget left, is no event).

    Groups whose tasks all show the new verdict already are skipped without a query; the rest are
    read in one query and written in one statement, whatever the number of groups.

    The two rules that mean "waiting for room in its pools" (no room; room taken this pass by
    higher-priority work) share a key: in a busy estate a queue swings between them every pass,
    and rewriting thousands of rows for that would tell the user nothing new."""
    shown: dict[tuple, dict] = {}
    changed: dict[tuple[int, int], dict] = {}
    for (resource, size), stored in loaded.verdict_keys.items():
        verdict = decisions.group_verdict(resource, size)
        shape = (
            verdict.rule,
            verdict.pools,
            verdict.policy,
            verdict.budget_left,
            verdict.budget_needed,
            verdict.reset_at,
        )
        new = shown.get(shape)
        if new is None:
            new = shown[shape] = verdict_json(verdict, loaded)
        if stored != {new["key"]}:
            changed[(int(resource), size)] = new
    if not changed:
        return 0
    groups = Q()
    for resource, size in changed:
        groups |= Q(compute_resource_id=resource, counted=size)
    rows = (
        Task.objects.annotate(counted=counted_milli())
        .filter(groups, state=Task.State.QUEUED)
        .annotate(key=KT("verdict__key"))
        .values_list("pk", "compute_resource_id", "counted", "key")
    )
    updates, noted = [], []
    for pk, resource, counted, key in rows:
        new = changed[(resource, counted)]
        if key != new["key"]:
            updates.append((pk, new))
            if (key or "").split("|", 1)[0] != new["key"].split("|", 1)[0]:
                noted.append((pk, new))
    _store_verdicts(updates)
    TaskEvent.objects.bulk_create(
        (
            TaskEvent(
                task_id=pk,
                at=now,
                kind=TaskEvent.Kind.VERDICT,
                reason=new["rule"],
                detail={"message": new["message"]},
            )
            for pk, new in noted
        ),
        batch_size=2000,
    )
    return len(updates)


def _store_verdicts(updates: list[tuple[int, dict]], chunk: int = 5000) -> None:
    """Write many tasks' verdicts: one ``UPDATE ... FROM (VALUES ...)`` per chunk on PostgreSQL,
    one ORM update per distinct verdict elsewhere."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for start in range(0, len(updates), chunk):
                part = updates[start : start + chunk]
                values = ", ".join(["(%s, %s::jsonb)"] * len(part))
                params = [value for pk, new in part for value in (pk, json.dumps(new))]
                cursor.execute(
                    f"UPDATE tasks_task AS t SET verdict = v.doc FROM (VALUES {values}) AS v(id, doc) "
                    "WHERE t.id = v.id",
                    params,
                )
        return
    by_verdict: dict[str, tuple[dict, list[int]]] = {}
    for pk, new in updates:
        by_verdict.setdefault(new["key"] + new["message"], (new, []))[1].append(pk)
    for new, ids in by_verdict.values():
        Task.objects.filter(pk__in=ids).update(verdict=new)
