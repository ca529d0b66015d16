"""Issue 35 in the database replay (``db_scenario.DatabaseReplay``): time limits on profiles,
compute resources and submits, dependencies, arrays, maintenance windows (scheduled by IT at the
scenario's start) and dated quota loans (lent by IT at their time; the engine gives them back at
their date, before that instant's events, as the simulator does).

A task with a time limit is claimed and started at its placement by a worker of its pool (the
simulator starts it there), so that its deadline counts; a worker reports each stop at the instant
it is asked for, as the simulator stops work at once. Work without a limit stays placed and
unclaimed, as before, so earlier scenarios replay as they did.

The simulator writes, within one instant: completions, the events' lines (cancels), then the pass's
time-limit stops (each with the cancels of the tasks that ran after it), its preemptions and its
placements. The database's events of one instant are put in that order (``rank``)."""

from datetime import timedelta
from decimal import Decimal

from apps.core.gpus import from_milli
from apps.engine.core import UNITS_PER_HOUR
from apps.policies import loans
from apps.policies import services as policies
from apps.pools.models import Worker
from apps.pools.services import maintenance
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.factories import WorkerFactory

US = 1_000_000
WORKER_GPUS = 10000  # more than any scenario's pool: a pool's capacity stays its declared one
RANKS = {"completed": 0, "canceled": 1, "timed_out": 2, "preempted": 3, "placed": 4}


def hours(units: int) -> Decimal:
    """Budget units as the budget hours the database keeps (to the thousandth)."""
    return (Decimal(units) / UNITS_PER_HOUR).quantize(Decimal("0.001"))


class Issue35Replay:
    """Mixed into ``DatabaseReplay``: it brings ``sc``, ``ids``, ``resources``, ``user``, ``at``."""

    def _time_limits(self, profiles, resources) -> None:
        for f in self.sc.profiles:
            if f.default_time_limit_s is not None or f.max_time_limit_s is not None:
                profile = profiles[f.name]
                profile.default_time_limit_s = f.default_time_limit_s
                profile.max_time_limit_s = f.max_time_limit_s
                profile.save(update_fields=["default_time_limit_s", "max_time_limit_s"])
        for r in self.sc.resources:
            resource, profile = resources[r.name], profiles[r.profile]
            own = (r.default_time_limit_s, r.max_time_limit_s)
            if own != (profile.default_time_limit_s, profile.max_time_limit_s):
                resource.default_time_limit_s, resource.max_time_limit_s = own
                resource.save(update_fields=["default_time_limit_s", "max_time_limit_s"])
        for f in self.sc.profiles:
            if f.unlimited_before_maintenance:
                policies.update_profile(profiles[f.name], unlimited_before_maintenance=True)
        for p in self.sc.pools:
            for w in p.maintenance:
                maintenance.schedule(
                    self.pools[p.name],
                    starts_at=self.at(w.start_us),
                    ends_at=self.at(w.end_us),
                    note=w.note or "",
                    now=self.sc.start,
                )
        self.arrays: dict[str, list[str]] = {}
        for e in self.sc.events:
            array = getattr(e.what, "array", None)
            if array is not None:
                self.arrays.setdefault(array, []).append(e.what.id)

    def _submit_fields(self, what) -> dict:
        pk_of = {name: pk for pk, name in self.ids.items()}
        fields = {}
        if what.time_limit_us is not None:
            fields["time_limit_s"] = what.time_limit_us // US
        for kind in ("after_ok", "after_any"):
            if getattr(what, kind):
                fields[kind] = [pk_of[name] for name in getattr(what, kind)]
        return fields

    def _submit_array(self, what, **fields) -> list[Task] | None:
        """An array's tasks, submitted at its first task's submit; None for its other tasks."""
        names = self.arrays[what.array]
        if what.id != names[0]:
            return None
        return tasks.submit_array(user=self.user, size=len(names), max_running=what.max_running, **fields)

    def _start_limited(self, now) -> None:
        """Claim and start, at their placement, the placed tasks with a time limit."""
        limited = Task.objects.filter(state=Task.State.PLACED, worker=None, time_limit_s__isnull=False)
        for task in limited.select_related("pool").order_by("pk"):
            worker = Worker.objects.filter(pool=task.pool).first()
            worker = worker or WorkerFactory(pool=task.pool, gpus=WORKER_GPUS)
            tasks.claim_many(worker, [task], now)
            tasks.mark_started(Task.objects.get(pk=task.pk), now)

    def _report_stops(self, now) -> None:
        stopping = list(Task.objects.filter(state=Task.State.STOPPING).order_by("pk"))
        if stopping:
            tasks.stopped_many(stopping, now)

    def _lend(self, loan, now) -> None:
        amount = hours(loan.amount) if loan.key == "budget_hours" else from_milli(loan.amount)
        loans.lend(
            self.policies[loan.lender],
            self.policies[loan.borrower],
            what=loan.key,
            amount=amount,
            until=self.at(loan.until_us),
            period=loan.period or "",
            check_permission=False,
            now=now,
        )

    def _issue35_times(self) -> list[int]:
        """When windows start and end, and when loans end: the simulator wakes then."""
        times = [w.start_us for p in self.sc.pools for w in p.maintenance]
        times += [w.end_us for p in self.sc.pools for w in p.maintenance]
        times += [e.what.until_us for e in self.sc.events if hasattr(e.what, "until_us")]
        return times

    def _deadlines(self) -> list[int]:
        running = Task.objects.filter(state=Task.State.RUNNING, time_limit_s__isnull=False)
        started = [((t.started_at - self.sc.start) // timedelta(microseconds=1), t) for t in running]
        return [at + (task.time_limit_s - task.ran_s) * US for at, task in started]

    @staticmethod
    def _rank(line: dict, event, ranks: dict[int, int]) -> int:
        """Where a line stands among those of its instant; a cancel because a dependency failed
        stands with the end that caused it."""
        if event.reason == Task.StopReason.DEPENDENCY_FAILED:
            cause = ranks.get((event.detail or {}).get("after"))
            rank = RANKS["canceled"] if cause is None else cause
        else:
            rank = RANKS[line["event"]]
        if event.kind != TaskEvent.Kind.PLACED:
            ranks[event.task_id] = rank
        return rank
