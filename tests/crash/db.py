"""The crash tests' database side, run as a process against ``DATABASE_URL`` (the test database,
or the test's own PostgreSQL cluster):

* ``python -m tests.crash.db setup``: the estate (one pool of 4 GPUs, an owner group with a
  reservation of 3 and a time budget, a borrower with 1, a member and API token each, an
  enrolment token); prints it as JSON.
* ``python -m tests.crash.db serve``: for each line ``live ACCEPTED`` or ``final ACCEPTED`` read,
  checks every rule of crash safety over the whole history in one snapshot of the database and
  answers one JSON line: the figures, or the broken rule. ``live`` checks a running stack (work
  may be held); ``final`` one that has drained (every task done or canceled, nothing held).
"""

import json
import os
import sys
from collections import defaultdict
from decimal import Decimal

import django

HOLD_ENDS = {"requeued", "succeeded", "failed", "canceled"}
STOP_ASKED = {"preempted", "cancel_requested"}
NOT_BY_A_PASS = {"worker_lost", "unclaimed", "released", "start_failed"}


def setup() -> dict:
    from django.utils import timezone

    from apps.accounts import services as accounts
    from apps.accounts.models import Membership
    from apps.policies import services as policies
    from apps.pools import services as pools
    from apps.pools.models import EnrolmentToken, Pool
    from tests.factories import GpuTypeFactory, GroupFactory, UserFactory

    pool = Pool.objects.create(name="crash", kind=Pool.Kind.BAREMETAL, gpu_type=GpuTypeFactory(), capacity=4)
    profile = policies.create_profile(name="1gpu", gpus=1, pools=[pool])
    groups = []
    # the borrower's work is longer, so that the owner's comes back while it runs: reclaim
    for name, reservation, budget, seconds in [
        ("Owner", 3, "1", ["0.5", "1"]),
        ("Borrower", 1, None, ["2", "3"]),
    ]:
        group = GroupFactory(name=name, slug=name.lower())
        policy = policies.create_policy(
            group=group,
            reservation=reservation,
            limit=4,
            budget_hours=budget,
            budget_period="day" if budget else "",
        )
        resource = policies.connect(policy=policy, profile=profile, name=f"{name.lower()}-1gpu")
        user = UserFactory(username=name.lower())
        accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
        token = accounts.create_api_token(user=user, name="crash")[1]
        groups.append({"resource": resource.name, "token": token, "seconds": seconds})
    enrolment = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="crash"), now=timezone.now())
    return {"groups": groups, "enrolment_token": enrolment}


def sweep_peak(changes):
    """The most held at any instant and the first instant it was, from (time, +gpus | -gpus)
    changes; at the same instant a release counts before a take (an interval's end is exclusive)."""
    held = peak = Decimal(0)
    instant = None
    for at, delta in sorted(changes, key=lambda change: (change[0], change[1] > 0)):
        held += delta
        if held > peak:
            peak, instant = held, at
    return peak, instant


def history(task_id: int) -> str:
    from apps.tasks.models import TaskEvent

    events = TaskEvent.objects.filter(task_id=task_id).exclude(kind="verdict").order_by("at", "pk")
    return f"task {task_id}: " + ", ".join(
        f"{e.kind}{'/' + e.reason if e.reason else ''} {e.at:%H:%M:%S.%f} {e.detail or ''}" for e in events
    )


def describe(interval) -> str:
    end = interval.end and f"{interval.end:%H:%M:%S.%f}"
    return f"[{interval.start:%H:%M:%S.%f} - {end}] {history(interval.task_id)}"


def check(accepted_file: str, final: bool) -> dict:
    from django.db import connection, transaction

    accepted = {int(line) for line in open(accepted_file).read().split()}
    connection.close()  # a fresh connection: the cluster may have restarted since the last check
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return check_snapshot(accepted, final)


def check_snapshot(accepted: set[int], final: bool) -> dict:
    from django.db.models import Count

    from apps.engine.models import PassRecord
    from apps.ledger.models import UsageInterval
    from apps.pools.models import Pool
    from apps.tasks.models import Task, TaskEvent
    from tests.engine_live.test_crash_safety import check_consistency, check_meter_against_intervals

    tasks = {t.pk: t for t in Task.objects.all()}
    lost = accepted - tasks.keys()
    assert not lost, f"tasks accepted over HTTP and lost: {sorted(lost)}"
    states = defaultdict(int)
    for task in tasks.values():
        states[task.state] += 1
    if final:
        assert set(states) <= {"succeeded", "canceled"}, f"every task done or canceled: {dict(states)}"
        assert not UsageInterval.objects.filter(end__isnull=True).exists(), "an interval open after the drain"

    capacity = {pool.pk: pool.capacity for pool in Pool.objects.all()}
    events = list(TaskEvent.objects.exclude(kind="verdict").order_by("at", "pk"))
    stops_asked = defaultdict(list)
    for event in events:
        if event.kind in STOP_ASKED:
            stops_asked[event.task_id].append(event.at)

    # Charged work, from the intervals: each counts on its pool from its start until it ends or its
    # stop is asked (stopping work counts for no room: docs/engine.md, "Usage").
    changes = defaultdict(list)
    for interval in UsageInterval.objects.all():
        ends = [at for at in stops_asked[interval.task_id] if at >= interval.start]
        ends += [interval.end] if interval.end is not None else []
        changes[interval.pool_id].append((interval.start, interval.gpus))
        if ends:
            changes[interval.pool_id].append((min(ends), -interval.gpus))
    peak_by_intervals = {pool: sweep_peak(c) for pool, c in changes.items()}
    for pool, (peak, instant) in peak_by_intervals.items():
        assert peak <= capacity[pool], (
            f"the intervals on pool {pool} hold {peak} GPUs at once, of {capacity[pool]}, at {instant}: "
            + "; ".join(describe(i) for i in UsageInterval.objects.filter(pool_id=pool, start__lte=instant))
        )

    # The same from the task events, and the work really running: claimed by a worker until it ends.
    holding: dict[int, dict] = {}
    placed, running = defaultdict(Decimal), defaultdict(Decimal)
    peak_placed, peak_running = defaultdict(Decimal), defaultdict(Decimal)
    placements = claims = 0
    for event in events:
        gpus, hold = tasks[event.task_id].gpus, holding.get(event.task_id)
        if event.kind == "placed":
            assert hold is None, f"placed while it held GPUs: {history(event.task_id)}"
            hold = holding[event.task_id] = {"pool": event.pool_id, "stopping": False, "claimed": False}
            placed[hold["pool"]] += gpus
            placements += 1
        elif event.kind == "claimed":
            assert hold and not hold["claimed"], f"claimed, not placed once: {history(event.task_id)}"
            hold["claimed"] = True
            running[hold["pool"]] += gpus
            claims += 1
        elif event.kind in STOP_ASKED and hold and not hold["stopping"]:
            hold["stopping"] = True
            placed[hold["pool"]] -= gpus
        elif event.kind in HOLD_ENDS and hold:
            placed[hold["pool"]] -= 0 if hold["stopping"] else gpus
            running[hold["pool"]] -= gpus if hold["claimed"] else 0
            del holding[event.task_id]
        if hold:
            pool = hold["pool"]
            assert placed[pool] <= capacity[pool], f"pool {pool}: {placed[pool]} GPUs placed at {event.at}"
            assert running[pool] <= capacity[pool], f"pool {pool}: {running[pool]} GPUs running at {event.at}"
            peak_placed[pool] = max(peak_placed[pool], placed[pool])
            peak_running[pool] = max(peak_running[pool], running[pool])
    if final:
        assert not holding, f"tasks still holding GPUs by their events: {holding}"

    check_consistency()
    check_meter_against_intervals()

    passes = PassRecord.objects.filter(skipped=False)
    check_one_pass_at_a_time(passes)
    by_kind = dict(TaskEvent.objects.values_list("kind").annotate(n=Count("pk")).order_by())
    preempted_by_passes = TaskEvent.objects.filter(kind="preempted").exclude(reason__in=NOT_BY_A_PASS).count()
    assert sum(p.placed for p in passes) == by_kind.get("placed", 0), "a placement without its pass record"
    assert sum(p.preempted for p in passes) == preempted_by_passes, "a preemption without its pass record"
    return {
        "accepted": len(accepted),
        "tasks": len(tasks),
        "states": dict(states),
        "intervals": UsageInterval.objects.count(),
        "passes": passes.count(),
        "placements": placements,
        "claims": claims,
        "preemptions": by_kind.get("preempted", 0),
        "requeues": by_kind.get("requeued", 0),
        "peak_gpus_by_intervals": {str(k): str(v[0]) for k, v in peak_by_intervals.items()},
        "peak_placed_by_events": {str(k): str(v) for k, v in peak_placed.items()},
        "peak_running_by_events": {str(k): str(v) for k, v in peak_running.items()},
        "capacity": {str(k): str(v) for k, v in capacity.items()},
    }


def check_one_pass_at_a_time(passes) -> None:
    """Never two passes at once, whichever process ran them: each ran pass's span (from taking
    the pass lock to the end of its writes, all under the lock) ends before the next one begins.
    1 ms of slack for the wall clock and the pass's own timer read apart."""
    from datetime import timedelta

    spans = sorted(passes.values_list("started_at", "duration_ms", "runner", "pk"))
    for (start, ms, runner, pk), (after, _, other, later) in zip(spans, spans[1:], strict=False):
        end = start + timedelta(milliseconds=ms)
        assert after >= end - timedelta(milliseconds=1), (
            f"two passes at once: pass {pk} ({runner}) ran {start:%H:%M:%S.%f} to {end:%H:%M:%S.%f},"
            f" pass {later} ({other}) began {after:%H:%M:%S.%f}"
        )


def serve() -> None:
    for line in sys.stdin:
        kind, accepted_file = line.split()
        try:
            answer = {"ok": True, **check(accepted_file, final=kind == "final")}
        except AssertionError as error:
            answer = {"ok": False, "error": str(error) or repr(error)}
        except Exception as error:  # the database gone, say: a failure of the check, not of a rule
            answer = {"ok": False, "error": f"the check could not run: {error!r}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "klique.settings.test")
    django.setup()
    if sys.argv[1] == "setup":
        print(json.dumps(setup()))
    else:
        serve()
