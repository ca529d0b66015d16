"""Priority inside a policy: a waiting task may preempt the same policy's running work of strictly
lower priority (reason "priority"). Written by the issue 34 work; see docs/engine.md."""

from __future__ import annotations

from .pass_reclaim import ReclaimPhase


class PriorityPhase(ReclaimPhase):
    def _priority_phase(self) -> None:
        """Placeholder until the rule lands: no preemption for priority."""
