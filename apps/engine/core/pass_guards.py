"""Anti-thrash guards on reclaim victims: a placed task is protected until it has held its
placement for its profile's minimum runtime, and a policy's work once reclaim has taken its cap of
preemptions in the sliding hour. When only protected work could have made room, the waiting task's
verdict says what protects it and until when.
"""

from __future__ import annotations

from datetime import datetime

from .pass_state import HOUR, PassState

MIN_RUNTIME, MAX_PREEMPTIONS = "min_runtime", "max_preemptions"


class ReclaimGuards(PassState):
    def _guard(self, k: int, q: int, took: int) -> tuple[str, datetime] | None:
        """Why running task k of policy q may not be a reclaim victim now, and until when; None if
        it may. `took`: q's victims already taken in this attempt."""
        mr = self.min_run[self.cr_prof[self.run_cr[k]]]
        if mr is not None:
            until = self.s.placed[k].placed_at + mr
            if until > self.s.now:
                return MIN_RUNTIME, until
        left = self.cap_left[q]
        if left is not None:
            more = self.reclaimed[q] + took
            if more >= left:
                cap = self.s.policies[q].max_preemptions_per_hour
                recent = self.recent[q] + [self.s.now] * more
                return MAX_PREEMPTIONS, recent[len(recent) - cap] + HOUR
        return None

    def _protection(self, victims: list[int], pi: int) -> tuple[str, datetime, str] | None:
        """What protects the victims an unguarded reclaim would take: the cause whose protection
        lasts longest among them, until when, and the pool; None when none of them is protected."""
        took: dict[int, int] = {}
        worst = None
        for k in victims:
            q = self.cr_pol[self.run_cr[k]]
            why = self._guard(k, q, took.get(q, 0))
            took[q] = took.get(q, 0) + 1
            if why is not None and (worst is None or why[1] > worst[1]):
                worst = why
        if worst is None:
            return None
        cause, until = worst
        return cause, until, self.s.pools[pi].id
