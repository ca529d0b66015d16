"""Tasks (the work users and agents send to compute resources) and task events (the audit trail)."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, IntegerField
from django.db.models.functions import Cast

from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS, MILLI
from apps.tasks.limits import (
    MAX_COMMAND_CHARS,
    MAX_NODES,
    validate_command_size,
    validate_nodes,
    validate_spec_size,
)


def counted_gpus(gpus, nodes) -> Decimal:
    """The GPUs a task counts wherever the control plane counts (reservation, limit, pool capacity,
    the usage ledger): its GPUs per node times its nodes."""
    return Decimal(gpus) * (nodes or 1)


def counted_milli(prefix: str = ""):
    """``counted_gpus`` as a query expression in integer milli-GPUs (``prefix`` reaches the task
    through a relation, e.g. ``"task__"``)."""
    return Cast(F(f"{prefix}gpus") * MILLI, IntegerField()) * F(f"{prefix}nodes")


def nodes_field(**kwargs) -> models.PositiveSmallIntegerField:
    return models.PositiveSmallIntegerField(
        validators=[validate_nodes],
        help_text=f"Nodes the task runs on, each with its GPUs (1 to {MAX_NODES}); it counts GPUs x nodes.",
        **kwargs,
    )


class Channel(models.TextChoices):
    PORTAL = "portal", "Portal"
    API = "api", "API"
    CLI = "cli", "CLI"
    SDK = "sdk", "SDK"
    MCP = "mcp", "Agent over MCP"
    SCHEDULE = "schedule", "Schedule"
    ADMIN = "admin", "Admin"


class Task(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued", "Waiting"
        PLACED = "placed", "Placed"
        RUNNING = "running", "Running"
        STOPPING = "stopping", "Stopping"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELED = "canceled", "Canceled"
        TIMED_OUT = "timed_out", "Timed out"

    ACTIVE_STATES = (State.PLACED, State.RUNNING, State.STOPPING)
    FINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELED, State.TIMED_OUT)

    class StopReason(models.TextChoices):
        RECLAIM = "reclaim", "Reclaimed for a reservation"
        BUDGET = "budget", "Budget used up"
        CANCELED = "canceled", "Canceled"
        WORKER_LOST = "worker_lost", "Worker lost"
        UNCLAIMED = "unclaimed", "Not claimed in time"
        RELEASED = "released", "Released by the pool (e.g. requeued by Slurm)"
        START_FAILED = "start_failed", "Its worker could not start it"
        IDLE = "idle", "Stopped by a session idle limit"
        CLOUD_CAP = "cloud_cap", "Back to its queue: a cloud spend cap was reached before a node took it"
        PRIORITY = "priority", "Preempted for a higher-priority task of its own group"
        FAIR_SHARE = "fair_share", "Taken back for a group below its fair share"
        TIME_LIMIT = "time_limit", "Stopped at its time limit"
        DEPENDENCY_FAILED = "dependency_failed", "A task it runs after did not succeed"
        MAINTENANCE = "maintenance", "Preempted for a maintenance window on its pool"

    class Kind(models.TextChoices):
        BATCH = "batch", "Batch"
        SESSION = "session", "Session"

    name = models.CharField(max_length=200, blank=True)
    kind = models.CharField(
        max_length=10,
        choices=Kind.choices,
        default=Kind.BATCH,
        help_text="batch: a command that runs to its end; session: an interactive server (a notebook, "
        "an IDE) stopped by its idle limits and never requeued (apps.sessions).",
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tasks")
    project = models.ForeignKey(
        "accounts.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks"
    )
    agent = models.ForeignKey(
        "accounts.Agent",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="tasks",
        help_text="The agent that submitted it with its token, acting for the user (its owner).",
    )
    compute_resource = models.ForeignKey(
        "policies.ComputeResource", on_delete=models.PROTECT, related_name="tasks"
    )
    gpus = models.DecimalField(
        "GPUs",
        max_digits=GPU_MAX_DIGITS,
        decimal_places=GPU_DECIMAL_PLACES,
        help_text="The task's size per node: the profile's, or the task's own if the profile takes it "
        "from the task.",
    )
    nodes = nodes_field(default=1)
    slots = models.JSONField(
        default=list,
        blank=True,
        help_text="The GPU slots of its worker the claim gave it (a claim by slots); a daemon that "
        "adopts the work after a restart gets them back.",
    )
    command = models.TextField(
        max_length=MAX_COMMAND_CHARS,
        validators=[validate_command_size],
        help_text="The command the worker runs.",
    )
    spec = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_spec_size],
        help_text="Environment, image and other run options.",
    )
    channel = models.CharField(max_length=10, choices=Channel.choices, default=Channel.API)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED, db_index=True)
    queue_seq = models.BigIntegerField(
        "queue seq",
        null=True,
        blank=True,
        db_index=True,
        help_text="Place in its compute resource's queue; kept when the task is preempted and requeued.",
    )
    priority = models.IntegerField(
        default=0,
        help_text="Within its policy's queue, higher is placed first; a waiting task may preempt the "
        "same policy's running work of lower priority. Kept when the task is requeued.",
    )
    pool = models.ForeignKey(
        "pools.Pool", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks"
    )
    worker = models.ForeignKey(
        "pools.Worker",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="tasks",
        help_text="The worker daemon that claimed the task.",
    )
    stop_reason = models.CharField(
        max_length=20, blank=True, help_text="Why a stop was requested: reclaim, budget, canceled, ..."
    )
    verdict = models.JSONField(
        default=dict,
        blank=True,
        help_text="The engine's reason this task waits (its place in line is read live).",
    )
    checkpoint = models.BooleanField(
        default=False, help_text="The task checkpoints, so a preempted run resumes where it was."
    )
    time_limit_s = models.PositiveIntegerField(
        "time limit (s)",
        null=True,
        blank=True,
        help_text="Running time after which its work is stopped and the task ends timed out; it "
        "counts running time only, across requeues. Empty: no limit.",
    )
    ran_s = models.PositiveIntegerField(
        "ran (s)",
        default=0,
        help_text="Running time of its earlier runs (before a preemption or a lost worker), counted "
        "against its time limit.",
    )
    waits_on = models.PositiveIntegerField(
        default=0,
        help_text="How many of the tasks it runs after (after_ok, after_any) have not ended; the "
        "engine places it only at 0.",
    )
    released_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the last of the tasks it runs after ended: its wait in its queue counts "
        "from then (the starvation guard), not from its submit.",
    )
    array = models.ForeignKey(
        "tasks.TaskArray",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="tasks",
        help_text="The array it belongs to (one spec submitted N times).",
    )
    array_index = models.PositiveIntegerField(
        null=True, blank=True, help_text="Its index in its array (KLIQUE_ARRAY_INDEX), from 0."
    )
    submitted_at = models.DateTimeField(auto_now_add=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    checkpointed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Its last checkpoint, reported by the task through its worker or the API; a "
        "preemption loses the work since then (or since its run's start, if later).",
    )
    preemption_count = models.PositiveIntegerField(default=0)
    last_preemption_reason = models.CharField(max_length=20, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    failure = models.TextField(
        blank=True,
        help_text="Why the task failed without an exit code: the error its worker met starting it.",
    )

    class Meta:
        ordering = ["-pk"]
        indexes = [
            models.Index(
                fields=["state", "compute_resource", "-priority", "queue_seq"], name="task_queue_idx"
            ),
            # A worker's claim: the placed, unclaimed tasks of its pool in claim order (partial, so
            # it holds only the few placements waiting for a worker).
            models.Index(
                fields=["pool", "placed_at", "queue_seq", "id"],
                condition=models.Q(state="placed", worker__isnull=True),
                name="task_claimable_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name or f"task {self.pk}"

    @property
    def counted_gpus(self) -> Decimal:
        return counted_gpus(self.gpus, self.nodes)


class TaskArray(models.Model):
    """Tasks of one spec submitted together (``--array N``): each has its index, and at most
    ``max_running`` of them hold GPUs at once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    size = models.PositiveIntegerField(help_text="How many tasks the array has.")
    max_running = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="At most this many of its tasks placed or running at once. Empty: no cap.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"array {self.pk} ({self.size} tasks)"


class TaskDependency(models.Model):
    """``task`` runs after ``needs`` ends: ``after_ok`` only when it succeeded (else the task is
    canceled, reason dependency_failed), ``after_any`` whatever its end."""

    class Kind(models.TextChoices):
        AFTER_OK = "after_ok", "After it succeeds"
        AFTER_ANY = "after_any", "After it ends"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="needs_links")
    needs = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="dependant_links")
    kind = models.CharField(max_length=10, choices=Kind.choices)

    class Meta:
        ordering = ["task", "needs"]
        constraints = [
            models.UniqueConstraint(fields=["task", "needs"], name="one_dependency_per_pair"),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id} {self.kind} task {self.needs_id}"


class TaskEvent(models.Model):
    """One change of a task: who or what did it, when, where and why."""

    class Kind(models.TextChoices):
        SUBMITTED = "submitted", "Submitted"
        PLACED = "placed", "Placed"
        PREEMPTED = "preempted", "Preempted"
        REQUEUED = "requeued", "Requeued"
        CLAIMED = "claimed", "Claimed by a worker"
        STARTED = "started", "Started"
        START_FAILED = "start_failed", "Could not start"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCEL_REQUESTED = "cancel_requested", "Cancel requested"
        CANCELED = "canceled", "Canceled"
        STOP_REQUESTED = "stop_requested", "Stop requested (idle or time limit)"
        ENDED = "ended", "Session ended"
        TIMED_OUT = "timed_out", "Timed out"
        VERDICT = "verdict", "Why waiting changed"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    pool = models.ForeignKey("pools.Pool", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=40, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    detail = models.JSONField(default=dict, blank=True)
    lost_gpu_hours = models.DecimalField(
        "lost GPU-hours",
        max_digits=16,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="On a preemption: the GPU-hours of work it lost, GPUs x (stop - the later of its "
        "last checkpoint and its run's start); 0 for work that had not started.",
    )

    class Meta:
        ordering = ["task", "at", "pk"]
        # (kind, reason) for the preemption counts; with ``at``, the engine's read of the reclaims
        # of the last hour (``apps.engine.loader._reclaims``) is a range of the index.
        indexes = [models.Index(fields=["kind", "reason", "at"], name="task_event_kind_at_idx")]

    def __str__(self) -> str:
        return f"{self.task} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class Schedule(models.Model):
    """Pipelines and unattended runs: at each due time of a cron expression (UTC), one task from
    the template below is submitted as the owner, through the same path as every other channel."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="schedules")
    name = models.CharField(max_length=200)
    cron = models.CharField(
        max_length=100, help_text="Five-field cron expression in UTC, e.g. '0 2 * * *' for 02:00 every day."
    )
    compute_resource = models.ForeignKey(
        "policies.ComputeResource", on_delete=models.PROTECT, related_name="schedules"
    )
    command = models.TextField(max_length=MAX_COMMAND_CHARS, validators=[validate_command_size])
    gpus = models.DecimalField(
        "GPUs", max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES, null=True, blank=True
    )
    nodes = nodes_field(default=1)
    project = models.ForeignKey(
        "accounts.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="schedules"
    )
    checkpoint = models.BooleanField(default=False)
    spec = models.JSONField(default=dict, blank=True, validators=[validate_spec_size])
    time_limit_s = models.PositiveIntegerField(
        "time limit (s)", null=True, blank=True, help_text="Each run's time limit. Empty: the default."
    )
    priority = models.JSONField(
        null=True,
        blank=True,
        help_text="The priority each run asks for: a whole number or a priority class's name, "
        "resolved at each due time. Empty: the compute resource's default.",
    )
    active = models.BooleanField(default=True)
    stopped_reason = models.CharField(max_length=500, blank=True, help_text="Why the schedule stopped.")
    stopped_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return self.name


class ScheduleRun(models.Model):
    """One due time of a schedule and the task it submitted. The unique constraint is what makes a
    due time submit exactly once, however many beats run."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    due_at = models.DateTimeField()
    task = models.ForeignKey(
        Task,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Empty when the submission was refused (the schedule then stopped).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-due_at"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "due_at"], name="one_run_per_due_time"),
        ]

    def __str__(self) -> str:
        return f"{self.schedule} at {self.due_at:%Y-%m-%d %H:%M}"
