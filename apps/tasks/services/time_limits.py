"""A submitted task's time limit: the one owner of the rule every way in applies (the API, bulk,
arrays, schedules at each due time, the portal, and the CLI, SDK and MCP through the API).

A batch task asks for a number of seconds or nothing. Nothing takes the compute resource's
default time limit, else its profile's; with neither, the maximum (so a maximum means every batch
task has a limit); with no maximum either, no limit. What is asked may not exceed the maximum: the
compute resource's, else its profile's. A session has no time limit: its idle limits end it.
The limit counts running time only, across requeues (``Task.ran_s``)."""

from django.core.exceptions import ValidationError

from apps.policies.models import ComputeResource
from apps.tasks.models import Task
from klique.numbers import duration

# What the database stores (a 32-bit integer, about 68 years): a number outside it is refused.
TIME_LIMIT_MAX_S = 2**31 - 1


def default_time_limit(resource: ComputeResource) -> int | None:
    if resource.default_time_limit_s is not None:
        return resource.default_time_limit_s
    return resource.profile.default_time_limit_s


def max_time_limit(resource: ComputeResource) -> int | None:
    if resource.max_time_limit_s is not None:
        return resource.max_time_limit_s
    return resource.profile.max_time_limit_s


def _refuse(message: str):
    raise ValidationError({"time_limit_s": message})


def resolve_time_limit(resource: ComputeResource, asked, *, session: bool = False) -> int | None:
    """The time limit (seconds) a task submitted to ``resource`` gets, asking for ``asked`` (None
    or a whole number of seconds); a ValidationError on field ``time_limit_s`` when it may not."""
    cap = max_time_limit(resource)
    if session:
        if asked is not None:
            _refuse("A session has no time limit: its idle limits end it.")
        return None
    if asked is None or asked == "":
        default = default_time_limit(resource)
        if default is not None and cap is not None:
            return min(default, cap)
        return default if default is not None else cap
    if isinstance(asked, bool) or not isinstance(asked, int):
        _refuse("Give the time limit as a whole number of seconds.")
    if not 1 <= asked <= TIME_LIMIT_MAX_S:
        _refuse(f"A time limit is a whole number of seconds from 1 to {TIME_LIMIT_MAX_S}.")
    if cap is not None and asked > cap:
        _refuse(
            f"Time limit {duration(asked)} ({asked} s) is above the maximum on {resource}: "
            f"at most {duration(cap)} ({cap} s)."
        )
    return asked


def ran_s(task, at) -> int:
    """Running seconds of the task at ``at``: its earlier runs and, while it runs, this one."""
    ran = task.ran_s
    if task.started_at is not None and task.state in (Task.State.RUNNING, Task.State.STOPPING):
        ran += max(0, int((at - task.started_at).total_seconds()))
    return ran


def left_s(task, at) -> int | None:
    """Running seconds the task has left before its limit at ``at`` (None: no limit); 0 or less
    once reached."""
    if task.time_limit_s is None:
        return None
    return task.time_limit_s - ran_s(task, at)
