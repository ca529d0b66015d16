"""Replay a simulator scenario through the database path: the estate is built with the services,
tasks are submitted and finished through the lifecycle, and each step runs ``run_pass`` on the
database. Its event lines can be compared with the pure simulator's."""

from datetime import timedelta
from decimal import Decimal

import time_machine

from apps.accounts.models import Group
from apps.core.gpus import from_milli
from apps.engine import services as engine
from apps.engine.core import UNITS_PER_HOUR, period_bounds
from apps.engine.core.scenario import Scenario, Submit
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.pools import services as pools
from apps.pools.models import GpuType
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.factories import UserFactory

US = 1_000_000


def _hours(units: int) -> Decimal:
    return (Decimal(units) / UNITS_PER_HOUR).quantize(Decimal("0.001"))


class DatabaseReplay:
    def __init__(self, sc: Scenario):
        self.sc = sc
        self.user = UserFactory(username="scenario")
        gpu_type = GpuType.objects.get_or_create(name="GPU")[0]
        self.pools = {
            p.name: pools.create_pool(
                name=p.name, kind="kubernetes", gpu_type=gpu_type, capacity=from_milli(p.capacity)
            )
            for p in sc.pools
        }
        self.profiles = {}
        for f in sc.profiles:
            self.profiles[f.name] = policies.create_profile(
                name=f.name,
                gpus=from_milli(f.size),
                time_weight=Decimal(f.time_weight) / 1000,
                size_from_task=f.size_from_task,
                pools=[self.pools[name] for name in f.pools],
            )
        for pool, order in sc.execution_order.items():
            policies.set_execution_order(self.pools[pool], [self.profiles[name] for name in order])
        self.policies = {}
        for p in sc.policies:
            parent = self.policies[p.parent].group if p.parent else None
            group = Group.objects.create(name=p.name, slug=p.name.lower(), parent=parent)
            self.policies[p.name] = policies.create_policy(
                group=group,
                reservation=from_milli(p.reservation),
                limit=from_milli(p.limit),
                budget_hours=_hours(p.budget) if p.budget is not None else None,
                budget_period=p.period or "",
            )
        self.resources = {
            r.name: policies.connect(
                policy=self.policies[r.policy], profile=self.profiles[r.profile], name=r.name
            )
            for r in sc.resources
        }
        for profile, order in sc.queuing_order.items():
            policies.set_queuing_order(self.profiles[profile], [self.policies[name] for name in order])
        self.ids: dict[int, str] = {}
        self.remaining: dict[int, int] = {}
        self.checkpoint: dict[int, bool] = {}

    def at(self, t_us: int):
        return self.sc.start + timedelta(microseconds=t_us)

    def run(self, until_us: int | None = None) -> list[dict]:
        end = self.sc.duration_us if until_us is None else until_us
        events = list(self.sc.events)
        t = 0
        while t <= end:
            now = self.at(t)
            with time_machine.travel(now, tick=False):
                self._complete(t, now)
                while events and events[0].at_us <= t:
                    self._apply(events.pop(0).what, now)
                record = engine.run_pass(now=now)
                self._keep_checkpoints(now)
            t = self._next(t, events, record)
        return self.lines()

    def _next(self, t: int, events, record) -> int:
        step = self.sc.step_us
        if record.placed or record.preempted or self._budget_burning():
            return t + step
        due = [self.sc.duration_us + step]
        if events:
            due.append(events[0].at_us)
        due.extend(self._completion_times())
        for policy in self.policies.values():
            if policy.budget_period:
                boundary = period_bounds(self.at(t), policy.budget_period)[1]
                due.append((boundary - self.sc.start) // timedelta(microseconds=1))
        nxt = max(min(due), t + step)
        return -(-nxt // step) * step

    def _budget_burning(self) -> bool:
        return Task.objects.filter(
            state__in=Task.ACTIVE_STATES,
            compute_resource__policy__budget_hours__isnull=False,
            compute_resource__profile__time_weight__gt=0,
        ).exists()

    def _completion_times(self) -> list[int]:
        times = []
        for task in Task.objects.filter(state=Task.State.PLACED):
            placed_us = (task.placed_at - self.sc.start) // timedelta(microseconds=1)
            times.append(placed_us + self.remaining[task.pk])
        return times

    def _complete(self, t: int, now) -> None:
        for task in Task.objects.filter(state=Task.State.PLACED).order_by("placed_at", "queue_seq"):
            placed_us = (task.placed_at - self.sc.start) // timedelta(microseconds=1)
            if placed_us + self.remaining[task.pk] <= t:
                tasks.finish(task, exit_code=0, at=now)

    def _keep_checkpoints(self, now) -> None:
        """Preempted work that checkpoints resumes where it was; the rest starts again."""
        for event in TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED, at=now):
            if self.checkpoint[event.task_id]:
                interval = UsageInterval.objects.get(task_id=event.task_id, end=now)
                self.remaining[event.task_id] -= (interval.end - interval.start) // timedelta(microseconds=1)

    def _apply(self, what, now) -> None:
        if isinstance(what, Submit):
            task = tasks.submit(
                user=self.user,
                compute_resource=self.resources[what.resource],
                command=what.id,
                gpus=from_milli(what.size),
                checkpoint=what.checkpoint,
            )
            self.ids[task.pk] = what.id
            self.remaining[task.pk] = what.duration_us
            self.checkpoint[task.pk] = what.checkpoint
        elif what.kind == "cancel":
            pk = next(pk for pk, name in self.ids.items() if name == what.target)
            tasks.cancel(Task.objects.get(pk=pk), at=now)
        elif what.kind == "engine":
            engine.set_engine_enabled(bool(what.value), at=now)
        elif what.kind == "set_budget":
            policies.update_policy(self.policies[what.target], budget_hours=_hours(what.value))
        elif what.kind == "set_capacity":
            pools.update_pool(self.pools[what.target], capacity=from_milli(what.value))
        else:
            field = what.kind.removeprefix("set_")
            policies.update_policy(self.policies[what.target], **{field: from_milli(what.value)})

    def lines(self) -> list[dict]:
        """The simulator's event lines, rebuilt from the task events on the database."""
        kinds = {
            TaskEvent.Kind.PLACED: "placed",
            TaskEvent.Kind.PREEMPTED: "preempted",
            TaskEvent.Kind.SUCCEEDED: "completed",
            TaskEvent.Kind.CANCELED: "canceled",
        }
        out = []
        for event in TaskEvent.objects.filter(kind__in=kinds).select_related("pool").order_by("at", "pk"):
            seconds = (event.at - self.sc.start) / timedelta(seconds=1)
            line = {
                "at": int(seconds) if seconds == int(seconds) else seconds,
                "task": self.ids[event.task_id],
                "event": kinds[event.kind],
            }
            if event.kind == TaskEvent.Kind.PLACED:
                line["pool"] = event.pool.name
            if event.kind == TaskEvent.Kind.PREEMPTED:
                line["reason"] = event.reason
            out.append(line)
        return out
