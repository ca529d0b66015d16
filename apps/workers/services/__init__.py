"""The worker daemons' protocol, in two parts: the daemons (enrolment, heartbeats, retirement, the
sweep) and their work (claims, reports, sync). Callers import this package."""

from apps.workers.services.daemons import (
    RELEASED,
    Claimed,
    InvalidToken,
    NotActive,
    NotThisPool,
    claimed,
    enrol,
    enrol_adopting,
    heartbeat,
    retire,
    sweep,
)
from apps.workers.services.work import (
    Reported,
    Synced,
    claim,
    report_checkpoint,
    report_exited,
    report_log,
    report_start_failed,
    report_started,
    report_stopped,
    sync,
)

__all__ = [
    "RELEASED",
    "Claimed",
    "InvalidToken",
    "NotActive",
    "NotThisPool",
    "Reported",
    "Synced",
    "claim",
    "claimed",
    "enrol",
    "enrol_adopting",
    "heartbeat",
    "report_exited",
    "report_checkpoint",
    "report_log",
    "report_start_failed",
    "report_started",
    "report_stopped",
    "retire",
    "sweep",
    "sync",
]
