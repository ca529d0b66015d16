"""What a simulation reports: the series for the HTML report, recorded as it runs, and the summary
line at the end (GPU-hours, budget hours and, with prices, spend per currency per policy, each
task's outcome, pool utilisation, cloud node-hours, what sessions' idle limits freed and, when time
limits or dependencies are used, the ends they caused).
"""

from __future__ import annotations

from .budget import UNITS_PER_HOUR, US_PER_S, units_to_money
from .sessions import Tally, freed_until
from .sim_records import SimTask
from .sim_state import GPU_US_PER_HOUR, US_PER_HOUR, SimState


class SimSummary(SimState):
    def _record(self, t: int) -> None:
        s = self.series
        s.times.append(t / US_PER_S)
        s.policy_use.append(list(self.own_use))
        s.pool_use.append(list(self.pool_used))
        s.queued.append(list(self.own_queued))
        s.capacity.append(list(self.capacity))

    def _summary(self) -> dict:
        end = self.end_us
        gpu_us = list(self.gpu_us)
        charged = list(self.charged)
        e_end = self.enabled_clock(end)
        for task in self.tasks.values():
            if task.state == "running":
                for j in self.chain[self.cr_pol[task.cr]]:
                    gpu_us[j] += task.size * (end - task.placed_us)
                    charged[j] += self.cr_weight[task.cr] * (e_end - task.e_start)
        self._integrate(end)
        spend = self._spend(end)
        pools = {
            p.name: {
                "utilization": round(self.pool_area[i] / self.capacity_area[i], 6)
                if self.capacity_area[i]
                else 0
            }
            for i, p in enumerate(self.sc.pools)
        }
        for i, cloud in self.clouds.items():
            pools[self.sc.pools[i].name].update(cloud.summary(end, US_PER_HOUR))
        return (
            {
                "policies": {
                    p.name: {
                        "gpu_hours": round(gpu_us[i] / GPU_US_PER_HOUR, 6),
                        "budget_hours": round(charged[i] / UNITS_PER_HOUR, 6),
                    }
                    | ({"spend": spend[i]} if spend else {})
                    for i, p in enumerate(self.sc.policies)
                },
                "tasks": {task.id: self._task_line(task, end) for task in self.tasks.values()},
                "pools": pools,
            }
            | self._sessions_summary(end)
            | ({"ends": dict(self.ends)} if self.ends is not None else {})
            | ({"lost_gpu_hours": self._lost()} if self.saves else {})
        )

    def _lost(self) -> dict[str, dict[str, float]]:
        """Only when some task checkpoints every checkpoint_s: the GPU-hours preemptions lost, per
        policy (its own work) and reason."""
        lost: dict[str, dict[str, float]] = {}
        for (p, reason), gpu_us in sorted(self.lost.items()):
            lost.setdefault(self.sc.policies[p].name, {})[reason] = round(gpu_us / GPU_US_PER_HOUR, 6)
        return lost

    def _spend(self, end: int) -> list[dict[str, float]] | None:
        """Only when the scenario has prices: each policy's subtree's spend per currency, from
        placement to release (or the end), at the scenario's prices."""
        if self.paid is None:
            return None
        paid = [list(row) for row in self.paid]
        for task in self.tasks.values():
            if task.state == "running":
                for j in self.chain[self.cr_pol[task.cr]]:
                    paid[j][task.pool] += task.size * (end - task.placed_us)
        names = [p.name for p in self.sc.pools]
        return [
            {
                currency: float(
                    units_to_money(sum(rates.get(n, 0) * us for n, us in zip(names, row, strict=True)))
                )
                for currency, rates in self.sc.prices.items()
            }
            for row in paid
        ]

    def _task_line(self, task: SimTask, end: int) -> dict:
        state = task.state
        if state == "running" and task.started_us is None:
            state = "placed"
        line = {
            "state": "waiting" if state == "held" else state,
            "preemptions": task.preemptions,
            "wait_s": self.seconds(task.wait_us + (end - task.since_us if task.state == "waiting" else 0)),
        }
        if task.waits_for:
            line["waits_for"] = list(task.waits_for)
        if task.reason is not None:
            line["reason"] = task.reason
        if task.session is not None:
            line["kind"] = "session"
            if task.session.reason is not None:
                line["reason"] = task.session.reason
            if task.session.limit is not None:
                line["limit"] = task.session.limit
        return line

    def _sessions_summary(self, end: int) -> dict:
        """Only when the scenario has sessions: their GPU-hours and what the idle limits freed, per
        compute resource that ran any and overall."""
        per: dict[int, Tally] = {}
        for task in self.tasks.values():
            s = task.session
            if s is None:
                continue
            tally = per.setdefault(task.cr, Tally())
            tally.sessions += 1
            tally.gpu_us += task.gpu_us
            if task.state == "running":
                tally.gpu_us += task.size * (end - task.placed_us)
            if s.limit is not None:
                tally.stopped[s.limit] += 1
                until = freed_until(
                    s.ended_us, task.started_us, task.duration_us, self.cancels.get(task.id, []), end
                )
                tally.freed_gpu_us += task.size * (until - s.ended_us)
        if not per:
            return {}
        total = Tally()
        for tally in per.values():
            total.add(tally)
        return {
            "sessions": total.line(GPU_US_PER_HOUR)
            | {
                "compute_resources": {
                    self.sc.resources[c].name: per[c].line(GPU_US_PER_HOUR) for c in sorted(per)
                }
            }
        }
