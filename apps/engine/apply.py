"""Write a pass's decisions back in one transaction: preemptions, placements, verdicts.

Rows are locked and their state checked again, since users, workers and sweeps change tasks
between the load and the apply: a task canceled meanwhile is not placed, work that ended
meanwhile is not preempted. Skipping is always safe; the next pass sees the new state.

Work stopped at its time limit (reason ``time_limit``) is stopped as a preemption is, but it is
no preemption: it is not counted against a group's preemptions, no preemption notice goes out, and
it ends ``timed_out`` once its worker reports the stop (``apps.tasks.services.lifecycle``). The
verdicts' words are ``apps.engine.verdict_words``'.
"""

import json
from collections import defaultdict
from dataclasses import dataclass, replace

from django.db import connection, transaction

from apps.accounts.models import Notification
from apps.core import events
from apps.core.sql import array_literal as _array
from apps.engine import core
from apps.engine.held import wrote_verdicts
from apps.engine.loader import Loaded
from apps.engine.verdict_words import REASON_WORDS, budget_used_up_words, dependency_key, verdict_json
from apps.pools.models import Pool
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent

TIME_LIMIT = Task.StopReason.TIME_LIMIT.value


@dataclass(frozen=True)
class Applied:
    placed: int
    preempted: int
    verdicts_changed: int
    # What was written, for the pass's log lines: (task id, pool id) of each placement and
    # (task id, pool id, reason) of each preemption.
    placements: tuple = ()
    preemptions: tuple = ()


CHUNK = 900  # rows per statement off PostgreSQL, within SQLite's limit of bound parameters


def apply(loaded: Loaded, decisions: core.Decisions, now) -> Applied:
    """Write the decisions in one transaction: the caller's (the pass writes its record in the same
    one), or its own."""
    with transaction.atomic(savepoint=False):
        preempted = _preempt(decisions.preemptions, now)
        placed = _place(decisions.placements, now)
        requeued = [task.pk for task in preempted if task.state == Task.State.QUEUED]
        changed = _verdicts(loaded, decisions, now, requeued) + _agent_verdicts(loaded, now)
    decided = {int(p.task): p for p in decisions.preemptions}
    return Applied(
        placed=len(placed),
        preempted=len(preempted),
        verdicts_changed=changed,
        placements=tuple((task.pk, pool.pk) for task, pool in placed),
        preemptions=tuple(
            (task.pk, int(decided[task.pk].pool), decided[task.pk].reason) for task in preempted
        ),
    )


def _preempt(preemptions, now) -> list[Task]:
    """The tasks stopped; those no worker had claimed are back in their queues already."""
    if not preemptions:
        return []
    ids = [int(p.task) for p in preemptions]
    rows = (
        Task.objects.select_for_update(no_key=True)
        .filter(pk__in=ids, state__in=(Task.State.PLACED, Task.State.RUNNING))
        .order_by("pk")
    )
    found = {task.pk: task for task in rows}
    by_reason = defaultdict(list)
    for preemption in preemptions:
        task = found.get(int(preemption.task))
        if task is not None:
            by_reason[(preemption.reason, preemption.window)].append(task)
    for (reason, window), group in by_reason.items():
        tasks.request_stop_many(group, reason, now, detail={"window": window} if window else None)
        if reason == TIME_LIMIT:
            continue  # no preemption: its end (timed out) is the task's own event
        Notification.objects.bulk_create(
            Notification(
                user_id=task.user_id,
                kind=Notification.Kind.PREEMPTED,
                link=f"/work/tasks/{task.pk}/",  # the portal's portal:task
                message=_preempted_message(task, reason, window),
            )
            for task in group
        )
    _preempted_notices(by_reason)
    return [task for group in by_reason.values() for task in group]


def _preempted_notices(by_reason) -> None:
    """One group notice (webhooks) per group whose work this pass preempted, summarising its tasks (the
    group: the task's compute resource's policy's group)."""
    from apps.accounts.models import Group
    from apps.policies.models import ComputeResource

    if not events.anyone_listening():
        return
    stopped = [
        (task, reason, window)
        for (reason, window), group in by_reason.items()
        if reason != TIME_LIMIT
        for task in group
    ]
    if not stopped:
        return
    resources = {task.compute_resource_id for task, _, _ in stopped}
    group_of = dict(ComputeResource.objects.filter(pk__in=resources).values_list("pk", "policy__group_id"))
    per_group = defaultdict(list)
    for task, reason, window in stopped:
        per_group[group_of[task.compute_resource_id]].append((task, reason, window))
    groups = Group.objects.in_bulk(list(per_group))
    for group_id, items in per_group.items():
        group = groups[group_id]
        n = len(items)
        lines = [f"• {_preempted_message(task, reason, window)}" for task, reason, window in items[:10]]
        if n > 10:
            lines.append(f"… and {n - 10} more.")
        link = f"/work/tasks/{items[0][0].pk}/" if n == 1 else ""
        title = f"{n} task{'s' if n != 1 else ''} of {group} preempted"
        events.notify(group, "preemption", title, "\n".join(lines), link)


def _preempted_message(task: Task, reason: str, window: str | None = None) -> str:
    """Sent when the stop is requested, naming the used-up window of a budget stop. A session is
    never requeued: it ends, and its user may start another."""
    words = REASON_WORDS[reason]
    if reason == "budget" and window:
        words = budget_used_up_words(window)
    if task.kind == Task.Kind.SESSION:
        return f"Session {task} is being stopped and will end: {words}."
    return f"Task {task} was preempted and requeued at the front of its queue: {words}."


def _place(placements, now) -> list:
    """The (task, pool) pairs placed: those still waiting of the decided ones."""
    if not placements:
        return []
    ids = [int(p.task) for p in placements]
    rows = (
        Task.objects.select_for_update(no_key=True, of=("self",))
        .select_related("compute_resource__policy", "compute_resource__profile")
        .filter(pk__in=ids, state=Task.State.QUEUED)
        .order_by("pk")
    )
    found = {task.pk: task for task in rows}
    pools = {str(pool.pk): pool for pool in Pool.objects.all()}
    pairs = [(found[int(p.task)], pools[p.pool]) for p in placements if int(p.task) in found]
    tasks.place_many(pairs, now)
    return pairs


def _verdicts(loaded: Loaded, decisions: core.Decisions, now, requeued: list[int]) -> int:
    """Store the verdict of each group of waiting tasks (one counted size, GPUs x nodes, in one
    compute resource: the core decides per group) on the tasks whose stored verdict differs, and a
    task event for each task whose rule changed (a new figure under the same rule, such as the
    budget left, is no event).

    The tasks to write come from the load, which read each waiting task's stored key: a group whose
    tasks all show the new verdict already costs nothing, and the rest are written without reading
    them again, in a fixed number of statements whatever their number (``_store_verdicts``). Work
    that this pass's preemptions sent back to its queue (``requeued``: its verdict was cleared when
    it was placed) gets its group's verdict in the same pass.

    The two rules that mean "waiting for room in its pools" (no room; room taken this pass by
    higher-priority work) share a key: in a busy estate a queue swings between them every pass,
    and rewriting thousands of rows for that would tell the user nothing new."""
    shown: dict[tuple, dict] = {}
    index_of: dict[int, int] = {}  # a verdict shown (by id) -> its place in ``written``
    written: list[dict] = []
    updates: list[tuple[int, int, bool]] = []
    # Tasks with a verdict of their own over their group's: a holder of the starvation guard, a task
    # its array's max_running holds (that rule first when both), a task a maintenance window ahead
    # keeps off a pool (its own time limit decides).
    own = {int(v.task): v for v in decisions.holders()}
    own.update((int(v.task), v) for v in decisions.array_verdicts())
    own.update((int(v.task), v) for v in decisions.maintenance_verdicts())
    groups = loaded.verdict_keys
    if requeued:
        groups = {group: dict(stored) for group, stored in groups.items()}
        wanted = {str(pk) for pk in requeued}
        for task in loaded.snapshot.placed:
            if task.id in wanted:
                stored = groups.setdefault((task.resource, task.size), {})
                stored[None] = [*stored.get(None, ()), int(task.id)]
    for (resource, size), stored in groups.items():
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
        key = new["key"]
        if len(stored) == 1 and key in stored:
            continue
        index = index_of.get(id(new))
        if index is None:
            index = index_of[id(new)] = len(written)
            written.append(new)
        rule_class = key.split("|", 1)[0]
        for old, ids in stored.items():
            if old != key:
                noted = (old or "").split("|", 1)[0] != rule_class
                updates.extend((pk, index, noted) for pk in ids if pk not in own)
    if own:
        old_of = {
            pk: old for stored in groups.values() for old, ids in stored.items() for pk in ids if pk in own
        }
        _own_verdicts(loaded, own, old_of, written, updates)
    held = decisions.held_verdicts() if loaded.snapshot.held else ()
    if held:
        _own_verdicts(loaded, {int(v.task): v for v in held}, loaded.held_keys, written, updates)
    if not updates:
        return 0
    return _store_verdicts(written, updates, now)


def _own_verdicts(loaded: Loaded, own: dict, old_of: dict, written: list, updates: list) -> None:
    """Tasks with a verdict of their own (a holder of the starvation guard, a task its array's cap
    holds, a task waiting for its dependencies): written where its stored key (``old_of``) differs,
    so that it is not rewritten every pass. Tasks with the same verdict share its document."""
    documents: dict[core.Verdict, int] = {}  # a verdict less its task -> its place in ``written``
    for pk, verdict in own.items():
        if verdict.rule == "dependency" and old_of.get(pk) == dependency_key(verdict.waits_for):
            continue
        shape = replace(verdict, task="", resource="", position=0)
        index = documents.get(shape)
        if index is None:
            index = documents[shape] = len(written)
            written.append(verdict_json(verdict, loaded))
        new = written[index]
        old = old_of.get(pk)
        if old == new["key"]:
            continue
        updates.append((pk, index, (old or "").split("|", 1)[0] != new["rule"]))


def _agent_verdicts(loaded: Loaded, now) -> int:
    """Store the verdict of the tasks an agent's cap holds (``apps.engine.agent_caps``) where it
    differs from theirs."""
    written: list[dict] = []
    index_of: dict[str, int] = {}
    updates: list[tuple[int, int, bool]] = []
    for pk, held in loaded.agent_held.items():
        key = held.verdict["key"]
        if held.old_key == key:
            continue
        if key not in index_of:
            index_of[key] = len(written)
            written.append(held.verdict)
        noted = (held.old_key or "").split("|", 1)[0] != held.verdict["rule"]
        updates.append((pk, index_of[key], noted))
    return _store_verdicts(written, updates, now) if updates else 0


def _store_verdicts(verdicts: list[dict], updates: list[tuple[int, int, bool]], now) -> int:
    """Write the verdicts: ``updates`` holds (task, index in ``verdicts``, whether its rule changed).
    A task no longer waiting (canceled since the load) is left alone. Returns the tasks written.

    On PostgreSQL, one statement whatever the number of tasks: the update and the events are fed
    from arrays (``unnest``), each distinct verdict sent once. Elsewhere, a read of which tasks
    still wait and one ``executemany`` per chunk, the events in batched inserts.

    On PostgreSQL the held snapshot is told which tasks got which key, in which transaction
    (``held.wrote_verdicts``): it takes them from there, not from the change log."""
    ids = [pk for pk, _, _ in updates]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                """
                WITH changed AS (
                    UPDATE tasks_task AS t SET verdict = d.doc::jsonb
                    FROM unnest(%s::bigint[], %s::int[], %s::boolean[]) AS u(id, n, noted)
                    JOIN unnest(%s::text[]) WITH ORDINALITY AS d(doc, n) ON d.n = u.n
                    WHERE t.id = u.id AND t.state = %s
                    RETURNING t.id, u.n, u.noted
                ), events AS (
                    INSERT INTO tasks_taskevent (task_id, at, kind, pool_id, reason, actor_id, detail)
                    SELECT c.id, %s, %s, NULL, e.reason, NULL, e.detail::jsonb
                    FROM changed AS c
                    JOIN unnest(%s::text[], %s::text[]) WITH ORDINALITY AS e(reason, detail, n) ON e.n = c.n
                    WHERE c.noted
                    RETURNING 1
                )
                SELECT (SELECT array_agg(id ORDER BY id) FROM changed),
                    (SELECT array_agg(n ORDER BY id) FROM changed),
                    (SELECT count(*) FROM events), pg_current_xact_id()::text::bigint
                """,
                [
                    _array(ids),
                    _array(index + 1 for _, index, _ in updates),
                    _array("t" if noted else "f" for _, _, noted in updates),
                    [json.dumps(verdict) for verdict in verdicts],
                    Task.State.QUEUED.value,
                    now,
                    TaskEvent.Kind.VERDICT.value,
                    [verdict["rule"] for verdict in verdicts],
                    [json.dumps({"message": verdict["message"]}) for verdict in verdicts],
                ],
            )
            written, indexes, _, mark = cursor.fetchone()
        keys = {pk: verdicts[n - 1]["key"] for pk, n in zip(written or (), indexes or (), strict=True)}
        wrote_verdicts(mark, keys)
        return len(keys)
    waiting = set()
    for start in range(0, len(ids), CHUNK):
        waiting.update(
            Task.objects.filter(pk__in=ids[start : start + CHUNK], state=Task.State.QUEUED).values_list(
                "pk", flat=True
            )
        )
    updates = [update for update in updates if update[0] in waiting]
    documents = [json.dumps(verdict) for verdict in verdicts]
    table, column = Task._meta.db_table, Task._meta.get_field("verdict").column
    with connection.cursor() as cursor:
        for start in range(0, len(updates), CHUNK):
            cursor.executemany(
                f"UPDATE {table} SET {column} = %s WHERE id = %s",
                [(documents[index], pk) for pk, index, _ in updates[start : start + CHUNK]],
            )
    TaskEvent.objects.bulk_create(
        (
            TaskEvent(
                task_id=pk,
                at=now,
                kind=TaskEvent.Kind.VERDICT,
                reason=verdicts[index]["rule"],
                detail={"message": verdicts[index]["message"]},
            )
            for pk, index, noted in updates
            if noted
        ),
        batch_size=CHUNK,
    )
    return len(updates)
