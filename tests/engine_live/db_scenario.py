"""Replay a simulator scenario through the database path: the estate is built with the services,
tasks are submitted and finished through the lifecycle, and each step runs ``run_pass`` on the
database. Its event lines can be compared with the pure simulator's.

Every setting a scenario gives is carried to the database, the issue-34 ones too: a policy's
lending, over-quota weight and lendable part, a profile's starvation guard (a scenario without one
has it off, although a new profile on the database guards after 600 s) and a submit's priority.
Issue 35's time limits, dependencies and arrays: ``db_scenario_issue35``."""

from datetime import datetime, timedelta
from decimal import Decimal

import time_machine
from django.core.exceptions import ValidationError

from apps.accounts.models import Group
from apps.core.gpus import from_milli
from apps.engine import services as engine
from apps.engine.core import period_bounds, units_to_money
from apps.engine.core.scenario_model import Loan, Scenario, Submit
from apps.ledger.models import UsageInterval
from apps.policies import loans
from apps.policies import services as policies
from apps.policies.money_windows import set_money_windows
from apps.pools import services as pools
from apps.pools.models import GpuType
from apps.pricing.models import Price
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.engine_live.db_scenario_issue35 import Issue35Replay, hours
from tests.factories import UserFactory

US = 1_000_000


class DatabaseReplay(Issue35Replay):
    def __init__(self, sc: Scenario):
        self.sc = sc
        self.user = UserFactory(username="scenario")
        gpu_type = GpuType.objects.get_or_create(name="GPU")[0]
        # with prices (issue 37), each pool has its own GPU type, priced per currency from the day
        # before the start (a pool not priced costs nothing)
        gpu_types = {
            p.name: GpuType.objects.get_or_create(name=f"GPU {p.name}")[0] if sc.prices else gpu_type
            for p in sc.pools
        }
        for currency, rates in sc.prices.items():
            for pool_name, rate in rates.items():
                Price.objects.create(
                    gpu_type=gpu_types[pool_name],
                    currency=currency,
                    per_gpu_hour=Decimal(rate) / 10**6,
                    effective_from=sc.start.date() - timedelta(days=1),
                )
        self.pools = {
            p.name: pools.create_pool(
                name=p.name,
                kind="kubernetes",
                gpu_type=gpu_types[p.name],
                capacity=from_milli(p.capacity),
                now=sc.start,
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
            policies.update_profile(
                self.profiles[f.name], min_runtime_s=f.min_runtime_s, starvation_s=f.starvation_s
            )
        for pool, order in sc.execution_order.items():
            policies.set_execution_order(self.pools[pool], [self.profiles[name] for name in order])
        self.policies = {}
        for p in sc.policies:
            parent = self.policies[p.parent].group if p.parent else None
            group = Group.objects.create(name=p.name, slug=p.name.lower(), parent=parent)
            main = p.budgets[0] if p.budgets else None
            self.policies[p.name] = policies.create_policy(
                group=group,
                reservation=from_milli(p.reservation),
                limit=from_milli(p.limit),
                budget_hours=hours(main[1]) if main else None,
                budget_period=main[0] if main else "",
            )
            policies.update_policy(
                self.policies[p.name],
                max_preemptions_per_hour=p.max_preemptions_per_hour,
                lending=p.lending,
                over_quota_weight=Decimal(p.over_quota_weight) / 1000,
                lendable=None if p.lendable is None else from_milli(p.lendable),
            )
            if len(p.budgets) > 1:
                further = {period: hours(units) for period, units in p.budgets[1:]}
                policies.set_budget_windows(self.policies[p.name], further)
            if p.money:
                money = {period: (units_to_money(units), code) for period, units, code in p.money}
                set_money_windows(self.policies[p.name], money)
        # as the simulator does, a budget stop names its window where the task's policy or an
        # ancestor has several windows
        specs = {p.name: p for p in sc.policies}
        self.named_window = {}
        for name in specs:
            node, several = name, False
            while node is not None:
                several = several or len(specs[node].budgets) > 1 or bool(specs[node].money)
                node = specs[node].parent
            self.named_window[name] = several
        self.resources = {
            r.name: policies.connect(
                policy=self.policies[r.policy], profile=self.profiles[r.profile], name=r.name
            )
            for r in sc.resources
        }
        for profile, order in sc.queuing_order.items():
            policies.set_queuing_order(self.profiles[profile], [self.policies[name] for name in order])
        self._time_limits(self.profiles, self.resources)
        self.ids: dict[int, str] = {}
        self.remaining: dict[int, int] = {}
        self.checkpoint: dict[int, bool] = {}
        self.rejected: list[dict] = []  # submits refused because they never fit, as the simulator's lines

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
                loans.end_due(now)  # a loan's end comes before its instant's events
                while events and events[0].at_us <= t:
                    self._apply(events.pop(0).what, now)
                self._report_stops(now)
                record = engine.run_pass(now=now)
                self._start_limited(now)
                self._report_stops(now)
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
        due.extend(self._deadlines())
        due.extend(x for x in self._issue35_times() if x > t)
        due.extend(self._reclaim_release_times())
        due.extend(self._starvation_times(t))
        for p in self.sc.policies:
            for period, *_ in p.budgets + p.money:
                boundary = period_bounds(self.at(t), period)[1]
                due.append((boundary - self.sc.start) // timedelta(microseconds=1))
        nxt = max(min(due), t + step)
        return -(-nxt // step) * step

    def _budget_burning(self) -> bool:
        active = Task.objects.filter(state__in=Task.ACTIVE_STATES)
        return (
            active.filter(
                compute_resource__policy__budget_hours__isnull=False,
                compute_resource__profile__time_weight__gt=0,
            ).exists()
            or bool(self.sc.prices)  # money windows (issue 37) burn on priced pools
            and active.filter(compute_resource__policy__extra_budgets__amount__isnull=False).exists()
        )

    def _completion_times(self) -> list[int]:
        times = []
        for task in Task.objects.filter(state__in=(Task.State.PLACED, Task.State.RUNNING)):
            placed_us = (task.placed_at - self.sc.start) // timedelta(microseconds=1)
            times.append(placed_us + self.remaining[task.pk])
        return times

    def _reclaim_release_times(self) -> list[int]:
        """When reclaim held back by a minimum runtime or a cap may go ahead: the live engine's
        next pass (every ``ENGINE_PASS_INTERVAL_S``) is there, as the simulator's step is."""
        held = Task.objects.filter(state=Task.State.QUEUED, verdict__rule="reclaim_held")
        return [
            (datetime.fromisoformat(reset_at) - self.sc.start) // timedelta(microseconds=1)
            for reset_at in held.values_list("verdict__reset_at", flat=True)
        ]

    def _starvation_times(self, t: int) -> list[int]:
        """When a waiting task's starvation guard starts holding a pool: the live engine's next
        pass is there, as the simulator's step is."""
        waiting = Task.objects.filter(
            state=Task.State.QUEUED, compute_resource__profile__starvation_s__isnull=False
        ).values_list("submitted_at", "compute_resource__profile__starvation_s")
        times = [
            (submitted - self.sc.start + timedelta(seconds=guard)) // timedelta(microseconds=1)
            for submitted, guard in waiting
        ]
        return [at for at in times if at > t]

    def _complete(self, t: int, now) -> None:
        running = Task.objects.filter(state__in=(Task.State.PLACED, Task.State.RUNNING))
        for task in running.order_by("placed_at", "queue_seq"):
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
        if isinstance(what, Loan):
            self._lend(what, now)
        elif isinstance(what, Submit):
            fields = {
                "compute_resource": self.resources[what.resource],
                "command": what.id,
                "gpus": from_milli(what.size),
                "checkpoint": what.checkpoint,
                "priority": what.priority,
                **self._submit_fields(what),
            }
            names = [what.id] if what.array is None else self.arrays[what.array]
            try:
                if what.array is None:
                    made = [tasks.submit(user=self.user, **fields)]
                else:
                    made = self._submit_array(what, **fields)
            except ValidationError as refused:
                if not any("never fit" in message for message in refused.messages):
                    raise
                seconds = (now - self.sc.start) / timedelta(seconds=1)
                at = int(seconds) if seconds == int(seconds) else seconds
                rejected = {"at": at, "event": "rejected", "reason": "never_fits"}
                self.rejected.extend({**rejected, "task": name} for name in names)
                return
            if made is None:  # a later task of an array, submitted with its first
                return
            for task, name in zip(made, names, strict=True):
                self.ids[task.pk] = name
                self.remaining[task.pk] = what.duration_us
                self.checkpoint[task.pk] = what.checkpoint
        elif what.kind == "cancel":
            pk = next(pk for pk, name in self.ids.items() if name == what.target)
            tasks.cancel(Task.objects.get(pk=pk), at=now)
        elif what.kind == "engine":
            engine.set_engine_enabled(bool(what.value), at=now)
        elif what.kind == "set_budget":
            policy = self.policies[what.target]
            policy.refresh_from_db()
            if what.period in (None, policy.budget_period):
                policies.update_policy(policy, budget_hours=hours(what.value))
            else:
                further = policies.extra_budgets_of(policy) | {what.period: hours(what.value)}
                policies.set_budget_windows(policy, further)
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
            TaskEvent.Kind.TIMED_OUT: "timed_out",
        }
        ranks: dict[int, int] = {}
        out = []
        events = TaskEvent.objects.filter(kind__in=kinds).select_related(
            "pool", "task__compute_resource__policy__group"
        )
        for event in events.order_by("at", "pk"):
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
                window = (event.detail or {}).get("window")
                if window and self.named_window[event.task.compute_resource.policy.group.name]:
                    line["window"] = window
            if event.reason == Task.StopReason.DEPENDENCY_FAILED:
                line["reason"] = event.reason
            out.append((line, self._rank(line, event, ranks)))
        # a submit is refused before the pass of its instant: first among the lines of that time
        out.sort(key=lambda pair: (pair[0]["at"], pair[1]))
        return sorted(self.rejected + [line for line, _ in out], key=lambda line: line["at"])
