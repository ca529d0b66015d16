"""The GPUs the daemon serves and what its tasks book of them, in milli-GPUs on its GPU slots
(``slots``).

Where the pool's scheduler picks the GPUs (``claims_total``) a task's GPUs are booked out of the
free total (``slots.take_total``), so the free total the daemon claims with always falls by what
the control plane handed it. A runner that can see its pool's GPUs (``observed_gpus``) bounds
what the daemon serves.
"""

import logging
from decimal import Decimal

from klique.worker import slots as gpu_slots
from klique.worker.work import Held

log = logging.getLogger("klique.worker")

# How often a runner that can see its pool's GPUs (``observed_gpus``: Kubernetes nodes, Slurm's
# GRES) is asked; the daemon serves no more than it sees.
OBSERVE_EVERY_S = 60.0


class Booking:
    """The GPU accounting (``free``, ``observed``): a part of ``Daemon`` (daemon.py), whose state it
    uses."""

    def observe(self, now: float) -> None:
        """Ask the runner, at most every ``OBSERVE_EVERY_S``, how many GPUs its pool really has."""
        probe = getattr(self.runner, "observed_gpus", None)
        if probe is None or now < self.observe_at:
            return
        self.observe_at = now + OBSERVE_EVERY_S
        seen = probe()
        if seen is not None and seen != self.observed:
            fields = {"observed": seen, "declared": len(self.settings.devices)}
            log.info("GPUs seen in the pool", extra={"fields": fields})
        self.observed = seen

    def serving(self) -> int:
        """The GPUs this daemon serves: its ``--gpus`` (or NVML's), never more than the runner sees."""
        declared = len(self.free)
        return declared if self.observed is None else max(0, min(declared, self.observed))

    def has_room(self) -> bool:
        if self.free and self.observed is not None:
            return Decimal(self.free_gpus()) > 0
        return not self.free or any(self.free)

    def book(self, task: dict, size: int) -> dict[int, int]:
        """Take the task's GPUs out of the free ones: by total where the pool's scheduler picks them,
        else on the slots the claim named (or, when they do not fit, where it fits now)."""
        if self.runner.claims_total:
            return gpu_slots.take_total(self.free, size)
        slots = task.get("slots") or []
        if not self.fits(slots, size):
            slots = gpu_slots.fit(self.free, size) or []
        gpu_slots.take(self.free, slots, size)
        return {index: min(size, gpu_slots.WHOLE) for index in slots}

    def devices(self, held: Held) -> list[str]:
        """The GPUs handed to the runner: none where the pool's scheduler picks them."""
        if self.runner.claims_total:
            return []
        return [self.settings.devices[index] for index in held.slots]

    def fits(self, slots, size: int) -> bool:
        if not isinstance(slots, list) or not all(type(index) is int for index in slots):
            return False
        if not all(0 <= index < len(self.free) for index in slots) or len(set(slots)) != len(slots):
            return False
        if size >= gpu_slots.WHOLE:
            return len(slots) * gpu_slots.WHOLE == size and all(
                self.free[i] == gpu_slots.WHOLE for i in slots
            )
        return (size == 0 and not slots) or (len(slots) == 1 and self.free[slots[0]] >= size)

    def size(self, task: dict) -> int:
        """The milli-GPUs a task takes here: its GPUs per node times its nodes. Where the scheduler
        allocates whole GPUs (Slurm), each node's fraction takes a whole GPU. ValueError when its
        ``gpus`` or ``nodes`` cannot be read."""
        nodes = task.get("nodes", 1)
        if type(nodes) is not int or nodes < 1:
            raise ValueError(f"nodes {nodes!r} is not a whole number of at least 1")
        try:
            per_node = gpu_slots.milli(task.get("gpus"))
        except (TypeError, ValueError, ArithmeticError):
            per_node = -1
        if per_node < 0:
            raise ValueError(f"gpus {task.get('gpus')!r} is not an amount of GPUs")
        if getattr(self.runner, "whole_gpus", False):
            per_node = -(-per_node // gpu_slots.WHOLE) * gpu_slots.WHOLE
        return per_node * nodes

    def release_gpus(self, held: Held) -> None:
        if held.taken:
            self.freed = True
            self.roomy.set()
        gpu_slots.give_back(self.free, held.taken)
        held.taken = {}

    def free_gpus(self) -> str:
        """The GPUs free to claim: of those it serves (``serving``), those no task holds."""
        free = sum(self.free)
        if self.observed is not None:
            held = len(self.free) * gpu_slots.WHOLE - free
            free = max(0, min(free, self.serving() * gpu_slots.WHOLE - held))
        return str(Decimal(free) / gpu_slots.WHOLE)
