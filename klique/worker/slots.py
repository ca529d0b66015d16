"""Which GPUs of a host a task gets, in integer milli-GPUs (1 GPU = 1000).

A host is a list of slots, one per GPU, each holding its free milli-GPUs. A task of whole GPUs
takes that many fully free GPUs, lowest index first; a fraction shares the fullest GPU it still
fits on, so that whole GPUs stay free for whole tasks; a CPU-only task takes none. The control
plane uses the same rule when a worker claims, so the daemon runs a task on the GPUs the claim
named.

Where the pool's scheduler picks the GPUs (Slurm, Kubernetes) the worker claims by its free
total, and a task's share is booked with ``take_total``: drained from the slots until its size is
covered, wherever that leaves it, so the total the daemon reports always falls by what the task
takes.
"""

from decimal import Decimal

WHOLE = 1000


def milli(amount: Decimal | str | int) -> int:
    value = Decimal(amount) * WHOLE
    if value != value.to_integral_value():
        raise ValueError(f"{amount} has more than 3 decimals")
    return int(value)


def fit(free: list[int], size: int) -> list[int] | None:
    """The slots a task of ``size`` milli-GPUs would take, or None when it does not fit."""
    if size <= 0:
        return []
    if size >= WHOLE:
        idle = [index for index, left in enumerate(free) if left >= WHOLE]
        count, rest = divmod(size, WHOLE)
        return idle[:count] if not rest and len(idle) >= count else None
    shared = [(left, index) for index, left in enumerate(free) if left >= size]
    return [min(shared)[1]] if shared else None


def take(free: list[int], slots: list[int], size: int) -> None:
    """Mark ``slots`` as used by a task of ``size`` milli-GPUs."""
    for index in slots:
        free[index] -= min(size, WHOLE)


def largest(free: list[int]) -> int:
    """The largest size that could fit: all fully free GPUs, or the most free on one GPU."""
    idle = sum(1 for left in free if left >= WHOLE)
    return max(idle * WHOLE, max(free, default=0))


def take_total(free: list[int], size: int) -> dict[int, int]:
    """Book ``size`` milli-GPUs out of the free total, draining the fullest slots first (whole GPUs
    stay whole longest): the amount taken from each slot. Never more than a slot has, so less
    than ``size`` when the total is short."""
    taken: dict[int, int] = {}
    for left, index in sorted((left, index) for index, left in enumerate(free) if left > 0):
        if size <= 0:
            break
        amount = min(left, size)
        free[index] -= amount
        taken[index] = amount
        size -= amount
    return taken


def give_back(free: list[int], taken: dict[int, int]) -> None:
    """Return what ``take`` or ``take_total`` booked."""
    for index, amount in taken.items():
        free[index] += amount
