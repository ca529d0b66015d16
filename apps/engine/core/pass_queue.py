"""One compute resource's queue during a pass, read lazily so that a pass costs per task placed,
not per task waiting."""

from __future__ import annotations

from collections import deque

from .budget import US_PER_S
from .snapshot import WaitingTask


class TaskQueue:
    """One compute resource's queue during a pass.

    With a fixed-size profile the queue is a FIFO with a head index. With sizes from tasks, the
    input is scanned lazily into one FIFO per size; the next task for a bound is the first head in
    queue order among the sizes that fit. `stopping` holds (queue key, size) of this resource's
    work that is being stopped: it goes back to its place by key (at the front of its priority),
    so it blocks work behind it of the same or larger size.
    """

    __slots__ = ("tasks", "fixed", "cursor", "heads", "stopping", "placed")

    def __init__(self, tasks, fixed: int | None, stopping: list[tuple[tuple[int, int], int]]):
        self.tasks = tasks
        self.fixed = fixed
        self.cursor = 0
        self.heads: dict[int, deque[int]] = {}
        self.stopping = stopping
        self.placed: list[int] = []

    def _open(self, key: tuple[int, int], size: int) -> bool:
        return not any(s_key < key and s_size <= size for s_key, s_size in self.stopping)

    def peek(self, bound: int, pi: int = -1) -> int:
        """Index of the first task in queue order with size <= bound, or -1 (`pi`: the pool it is
        for, which only `WindowQueue` reads)."""
        tasks = self.tasks
        if self.fixed is not None:
            i = self.cursor
            if self.fixed > bound or i >= len(tasks):
                return -1
            if self.stopping and not self._open(tasks[i].key, self.fixed):
                return -1
            return i
        best = -1
        for size, fifo in self.heads.items():
            if size <= bound and fifo:
                i = fifo[0]
                if (best < 0 or i < best) and (not self.stopping or self._open(tasks[i].key, size)):
                    best = i
        if best >= 0:
            return best
        heads = self.heads
        i, n = self.cursor, len(tasks)
        while i < n:
            t = tasks[i]
            fifo = heads.get(t.size)
            if fifo is None:
                fifo = heads[t.size] = deque()
            fifo.append(i)
            i += 1
            if t.size <= bound and len(fifo) == 1 and (not self.stopping or self._open(t.key, t.size)):
                self.cursor = i
                return i - 1
        self.cursor = i
        return -1

    def pop(self, i: int, task: WaitingTask) -> None:
        if self.fixed is not None:
            self.cursor += 1
        else:
            self.heads[task.size].popleft()
        self.placed.append(i)


class ArrayQueue(TaskQueue):
    """A queue in a pass whose snapshot caps arrays (`Snapshot.arrays`): a task whose array has no
    room left (`left[array] <= 0`) is passed over for the rest of the pass, so it blocks nothing
    behind it; its verdict is array_limit. Room left only falls while tasks are placed (a task that
    reclaim, fair share or priority stops keeps its place in the count until the next pass), so
    a task passed over would be passed over again."""

    __slots__ = ("left",)

    def __init__(self, tasks, fixed, stopping, left: dict[str, int]):
        super().__init__(tasks, fixed, stopping)
        self.left = left

    def peek(self, bound: int, pi: int = -1) -> int:
        left = self.left
        while True:
            i = super().peek(bound)
            if i < 0:
                return i
            t = self.tasks[i]
            if t.array is None or left.get(t.array, 1) > 0:
                return i
            if self.fixed is not None:
                self.cursor += 1
            else:
                self.heads[t.size].popleft()


class WindowQueue(TaskQueue):
    """A queue whose profile lists a pool with a maintenance window ahead: on such a pool a task is
    taken only if its time limit left ends by the window's start (`gaps[pi]`, microseconds from
    now; None: no window ahead), or it has none and its profile allows `unlimited` work. Tasks may
    then be taken out of queue order (one refused on pool A goes to pool B later), so each peek
    scans in queue order from a per-gap cursor, checking size, stopping work ahead, the array's cap
    and the time. The cursor passes over the tasks that are out for good at that gap (taken,
    behind stopping work, at their array's cap, too long for the window): the scan costs per task
    passed over for size only, and only in queues of such profiles."""

    __slots__ = ("left", "gaps", "unlimited", "taken", "skip")

    def __init__(self, tasks, fixed, stopping, left: dict[str, int], gaps: list, unlimited: bool):
        super().__init__(tasks, fixed, stopping)
        self.left = left
        self.gaps = gaps
        self.unlimited = unlimited
        self.taken: set[int] = set()
        self.skip: dict[int | None, int] = {}

    def peek(self, bound: int, pi: int = -1) -> int:
        gap = self.gaps[pi] if pi >= 0 else None
        tasks, taken, left, fixed, stopping = self.tasks, self.taken, self.left, self.fixed, self.stopping
        i, n, lead = self.skip.get(gap, 0), len(tasks), True
        found = -1
        while i < n:
            if i in taken:
                i += 1
                if lead:
                    self.skip[gap] = i
                continue
            t = tasks[i]
            if t.size > bound:
                if fixed is not None:
                    break
                lead = False
                i += 1
                continue
            out = (
                (stopping and not self._open(t.key, t.size))
                or (t.array is not None and left.get(t.array, 1) <= 0)
                or (gap is not None and not fits(t, gap, self.unlimited))
            )
            if not out:
                found = i
                break
            i += 1
            if lead:
                self.skip[gap] = i
        return found

    def pop(self, i: int, task: WaitingTask) -> None:
        self.taken.add(i)
        self.placed.append(i)


def fits(t: WaitingTask, gap_us: int, unlimited: bool) -> bool:
    """Whether task t may start on a pool whose next maintenance window starts in gap_us."""
    return unlimited if t.limit_s is None else t.limit_s * US_PER_S <= gap_us
