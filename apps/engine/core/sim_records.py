"""What the simulator keeps per task, session and budget window, and the series a report draws."""

from __future__ import annotations

from dataclasses import dataclass, field

from .scenario_model import IdleLimitsSpec
from .snapshot import WaitingTask


@dataclass(slots=True)
class SimTask:
    id: str
    cr: int
    size: int
    duration_us: int | None
    checkpoint: bool
    seq: int
    waiting: WaitingTask
    state: str = "waiting"
    left_us: int | None = 0
    since_us: int = 0
    wait_us: int = 0
    preemptions: int = 0
    pool: int = -1
    placed_us: int = 0
    started_us: int | None = None
    e_start: int = 0
    token: int = 0
    gpu_us: int = 0
    session: SimSession | None = None
    limit_us: int | None = None  # its time limit: running time, across requeues
    ran_us: int = 0  # running time of its earlier runs
    deadline_us: int | None = None  # when its time limit is reached, while it runs
    waits_for: list[str] | None = None  # while held: the tasks it runs after that have not ended
    reason: str | None = None  # why it ended, when its summary names it (dependency_failed)
    checkpoint_us: int | None = None  # it checkpoints every this much running time


def kept_us(task: SimTask, end_us: int) -> int:
    """The running time of the task's current run that a stop at end_us keeps: all of it when it
    checkpoints as it goes (`checkpoint`), its whole checkpoint periods with `checkpoint_us`, none
    without a checkpoint (a session loses its state). The rest is lost work."""
    if task.started_us is None or task.session is not None or not task.checkpoint:
        return 0
    ran = max(0, end_us - task.started_us)
    return ran if task.checkpoint_us is None else ran - ran % task.checkpoint_us


@dataclass(slots=True)
class SimSession:
    """A session's profile and, once it ended, why: `reason` (idle, reclaim, budget) and the idle
    `limit` that fired; `stop` is what its scheduled stop will be (completed, idle or lifetime)."""

    activity: tuple[tuple[int, bool], ...]
    limits: IdleLimitsSpec
    stop: str = "completed"
    reason: str | None = None
    limit: str | None = None
    ended_us: int = 0


@dataclass(slots=True)
class Account:
    """One budget window's meter for its current period, in budget units; a money window's
    (`rates`: pool name -> rate, see `budget`) in money units."""

    limit: int
    period: str
    rates: dict[str, int] | None = None
    currency: str = ""
    start_us: int = 0
    end_us: int = 0
    e0: int = 0
    closed: int = 0
    open_w: int = 0
    open_s: int = 0

    def used(self, e_now: int) -> int:
        return self.closed + self.open_w * e_now - self.open_s


@dataclass
class Series:
    """What the report draws, recorded at each step where something changed."""

    times: list[float] = field(default_factory=list)
    policy_use: list[list[int]] = field(default_factory=list)
    pool_use: list[list[int]] = field(default_factory=list)
    queued: list[list[int]] = field(default_factory=list)
    capacity: list[list[int]] = field(default_factory=list)
