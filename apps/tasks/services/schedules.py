"""Writes of schedules: cron expressions that submit tasks as their owner."""

from datetime import datetime

from croniter import CroniterError, croniter
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.models import Notification, User
from apps.accounts.selectors import member_group_ids
from apps.tasks.limits import size_errors
from apps.tasks.models import Channel, Schedule, ScheduleRun
from apps.tasks.services.priority import resolve_priority
from apps.tasks.services.submission import check_fits, check_nodes, submit, task_size
from apps.tasks.services.time_limits import resolve_time_limit

# Schedules: pipelines and unattended runs. Each due time of a schedule's cron expression (UTC)
# submits one task as the owner through ``submit``. The run row and the task are written in one
# transaction and a unique constraint on (schedule, due time) refuses a second one, so a due time
# submits exactly once however many beats run. A schedule that missed due times while no beat
# ran submits once, for the latest of them. A schedule keeps the priority it asks for (a number,
# a class's name or None) and each run resolves it then, so the class's value, the default and
# the maximum of that time apply; creating or changing a schedule checks it against today's. Its
# time limit (seconds, or None for the default at each due time) is kept and checked the same way.

SCHEDULE_FIELDS = [
    "name",
    "cron",
    "compute_resource",
    "command",
    "gpus",
    "nodes",
    "project",
    "checkpoint",
    "spec",
    "priority",
    "time_limit_s",
]


def next_due(cron: str, after: datetime) -> datetime:
    """The first due time strictly after ``after``."""
    return croniter(cron, after).get_next(datetime)


def latest_due(cron: str, now: datetime) -> datetime:
    """The last due time at or before ``now``."""
    previous = croniter(cron, now).get_prev(datetime)
    following = next_due(cron, previous)
    return following if following <= now else previous


def cron_error(cron: str) -> str | None:
    if not cron or len(cron.split()) != 5 or not croniter.is_valid(cron):
        return "Enter a cron expression of five fields (minute hour day month weekday), e.g. '0 2 * * *'."
    try:
        next_due(cron, timezone.now())
    except CroniterError:
        return "This cron expression is never due."
    return None


def schedule_refusal(schedule: Schedule) -> str | None:
    """Why the owner may not submit to the schedule's compute resource any more, or None."""
    owner, resource = schedule.owner, schedule.compute_resource
    if not owner.is_active:
        return f"The owner {owner} is deactivated."
    if resource.policy.group_id not in member_group_ids(owner):
        return (
            f"The owner {owner} is no longer a member of {resource.policy.group}, so may not submit "
            f"to compute resource {resource}."
        )
    return None


def _check_schedule(schedule: Schedule) -> None:
    errors = {}
    if not schedule.name.strip():
        errors["name"] = "Give the schedule a name."
    if not schedule.command.strip():
        errors["command"] = "Command is required."
    errors.update(size_errors(schedule.command, schedule.spec))
    error = cron_error(schedule.cron)
    if error:
        errors["cron"] = error
    refusal = schedule_refusal(schedule)
    if refusal:
        errors["compute_resource"] = refusal
    else:
        try:
            size = task_size(schedule.compute_resource, schedule.gpus)
            nodes = check_nodes(schedule.compute_resource, size, schedule.nodes)
            check_fits(schedule.compute_resource, size, nodes)
        except ValidationError as size_error:
            errors.update(size_error.message_dict)
        try:
            resolve_priority(schedule.compute_resource, schedule.priority)
        except ValidationError as priority_error:
            errors.update(priority_error.message_dict)
        try:
            resolve_time_limit(schedule.compute_resource, schedule.time_limit_s)
        except ValidationError as limit_error:
            errors.update(limit_error.message_dict)
    group = schedule.compute_resource.policy.group
    if schedule.project is not None and schedule.project.group_id != group.pk:
        errors["project"] = f"Project {schedule.project} does not belong to group {group}."
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def create_schedule(*, owner: User, now: datetime | None = None, **fields) -> Schedule:
    schedule = Schedule(owner=owner, **{k: v for k, v in fields.items() if k in SCHEDULE_FIELDS})
    schedule.spec = schedule.spec or {}
    _check_schedule(schedule)
    schedule.next_run_at = next_due(schedule.cron, now or timezone.now())
    schedule.save()
    return schedule


@transaction.atomic
def update_schedule(schedule: Schedule, *, now: datetime | None = None, **fields) -> Schedule:
    """Change the template or the cron expression; ``active=True`` restarts a stopped schedule and
    ``active=False`` pauses it. The next due time is counted from now."""
    now = now or timezone.now()
    schedule = Schedule.objects.select_for_update(no_key=True).get(pk=schedule.pk)
    for name in SCHEDULE_FIELDS:
        if name in fields:
            setattr(schedule, name, fields[name])
    schedule.active = fields.get("active", schedule.active)
    if schedule.active:
        _check_schedule(schedule)
        schedule.stopped_reason, schedule.stopped_at = "", None
        schedule.next_run_at = next_due(schedule.cron, now)
    else:
        if cron_error(schedule.cron):
            raise ValidationError({"cron": cron_error(schedule.cron)})
        schedule.next_run_at = None
        schedule.stopped_at = schedule.stopped_at or now
    schedule.save()
    return schedule


def delete_schedule(schedule: Schedule) -> None:
    schedule.delete()


def _stop_schedule(schedule: Schedule, reason: str, at: datetime) -> None:
    schedule.active, schedule.next_run_at = False, None
    schedule.stopped_reason, schedule.stopped_at = reason[:500], at
    schedule.save()
    Notification.objects.create(
        user=schedule.owner,
        kind=Notification.Kind.SCHEDULE_STOPPED,
        message=f"Schedule {schedule.name} stopped: {reason}",
    )


def _run_schedule(pk: int, now: datetime) -> bool:
    """Submit the latest due time of one schedule; False when another beat has it or it stopped."""
    try:
        with transaction.atomic():
            schedule = (
                Schedule.objects.select_for_update(no_key=True, skip_locked=True, of=("self",))
                .select_related("owner", "project", "compute_resource__policy__group")
                .filter(pk=pk, active=True, next_run_at__lte=now)
                .first()
            )
            if schedule is None:
                return False
            due = latest_due(schedule.cron, now)
            schedule.last_run_at, schedule.next_run_at = due, next_due(schedule.cron, now)
            run = ScheduleRun.objects.create(schedule=schedule, due_at=due)
            refusal = schedule_refusal(schedule)
            if refusal is None:
                try:
                    with transaction.atomic():
                        run.task = submit(
                            user=schedule.owner,
                            compute_resource=schedule.compute_resource,
                            command=schedule.command,
                            gpus=schedule.gpus,
                            nodes=schedule.nodes,
                            name=f"{schedule.name} @ {due:%Y-%m-%d %H:%M}",
                            project=schedule.project,
                            checkpoint=schedule.checkpoint,
                            spec=schedule.spec,
                            priority=schedule.priority,
                            time_limit_s=schedule.time_limit_s,
                            channel=Channel.SCHEDULE,
                        )
                except ValidationError as error:
                    refusal = "The task was refused: " + " ".join(error.messages)
            if refusal:
                _stop_schedule(schedule, refusal, now)
                return False
            run.save(update_fields=["task"])
            schedule.save(update_fields=["last_run_at", "next_run_at"])
            return True
    except IntegrityError:
        return False


def submit_due_schedules(now: datetime | None = None) -> int:
    """Submit every schedule that is due at ``now``; returns how many tasks were submitted."""
    now = now or timezone.now()
    due = Schedule.objects.filter(active=True, next_run_at__lte=now).order_by("next_run_at", "pk")
    return sum(_run_schedule(pk, now) for pk in due.values_list("pk", flat=True))
