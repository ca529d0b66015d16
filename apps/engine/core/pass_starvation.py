"""The starvation guard: a queue head that has waited its profile's `starvation_s` for free GPUs
holds one pool against new starts of other work (`hold`). See docs/engine.md."""

from __future__ import annotations

from .pass_state import PassState


class StarvationGuard(PassState):
    def _hold_starving(self) -> None:
        """Placeholder until the rule lands: no pool is held."""
