"""A task's time limit and dependencies as the API reads and shows them (issue 35's rules 1 and 2).
The fields check the shape only (a JSON integer, a list of task ids or ``{"item": n}``); the rules
(default, maximum, whose tasks, earlier items, cycles) are ``apps.tasks.services``', whose
refusals answer 400 on ``time_limit_s``, ``after_ok`` or ``after_any``."""

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from apps.core.fields import PlainIntegerField
from apps.tasks import selectors
from apps.tasks.models import Task, TaskDependency
from apps.tasks.services.dependencies import MAX_DEPENDENCIES
from apps.tasks.services.time_limits import TIME_LIMIT_MAX_S, left_s

TASK_ID_MAX = 2**63 - 1  # what the database stores for an id
TIME_LIMIT_HELP = (
    "Running seconds after which the task's work is stopped and it ends timed_out (running time "
    "only, across requeues). Left out: the compute resource's default time limit, else its "
    "profile's, else their maximum; at most that maximum. Batch tasks only."
)
AFTER_HELP = {
    "after_ok": "Task ids (yours) it runs after; when one ends in any state but succeeded, this task "
    "is canceled (reason dependency_failed).",
    "after_any": "Task ids (yours) it runs after, whatever their end.",
}
BULK_ITEMS = (
    ' In a bulk submission also {"item": n}: the n-th item (from 0) of the same request, before this one.'
)


def time_limit_field(**kwargs) -> PlainIntegerField:
    kwargs.setdefault("help_text", TIME_LIMIT_HELP)
    return PlainIntegerField(
        min_value=1, max_value=TIME_LIMIT_MAX_S, required=False, allow_null=True, **kwargs
    )


class DependenciesField(serializers.Field):
    """A list of task ids and, in a bulk request, ``{"item": n}`` references; null or left out: none."""

    default_error_messages = {
        "not_a_list": 'Give a list of task ids, e.g. [12, 15] (in a bulk submission also {{"item": 0}}).',
        "too_many": f"At most {MAX_DEPENDENCIES} dependencies per task.",
        "entry": 'Entry {index} is neither a task id (a JSON integer from 1) nor {{"item": n}} (n from 0).',
    }

    def __init__(self, kind: str, **kwargs):
        kwargs.setdefault("help_text", AFTER_HELP[kind] + BULK_ITEMS)
        super().__init__(required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, list):
            self.fail("not_a_list")
        if len(data) > MAX_DEPENDENCIES:
            self.fail("too_many")
        return [self._entry(index, entry) for index, entry in enumerate(data)]

    def _entry(self, index: int, entry):
        if _whole(entry) and 1 <= entry <= TASK_ID_MAX:
            return entry
        if isinstance(entry, dict) and set(entry) == {"item"} and _whole(entry["item"]):
            if 0 <= entry["item"] < settings.TASKS_BULK_MAX:
                return {"item": entry["item"]}
        self.fail("entry", index=index)

    def to_representation(self, value):
        return value


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class DependenciesFieldSchema(OpenApiSerializerFieldExtension):
    target_class = DependenciesField

    def map_serializer_field(self, auto_schema, direction):
        task_id = {"type": "integer", "minimum": 1, "maximum": TASK_ID_MAX}
        item = {
            "type": "object",
            "properties": {"item": {"type": "integer", "minimum": 0, "maximum": settings.TASKS_BULK_MAX - 1}},
            "required": ["item"],
            "additionalProperties": False,
        }
        return {"type": "array", "maxItems": MAX_DEPENDENCIES, "items": {"oneOf": [task_id, item]}}


class LinkSerializer(serializers.Serializer):
    task = serializers.IntegerField(help_text="The other task's id.")
    kind = serializers.ChoiceField(choices=TaskDependency.Kind.choices)
    state = serializers.ChoiceField(choices=Task.State.choices, help_text="The other task's state now.")


def links(context: dict, task: Task) -> selectors.TaskLinks:
    """The task's dependencies and dependants, read once for every task the context shows."""
    known = context.setdefault("links", {})
    if task.pk not in known:
        shown = context.get("tasks_shown") or [task]
        known.update(selectors.task_links([t.pk for t in shown if t.pk not in known] or [task.pk]))
    return known.get(task.pk) or selectors.TaskLinks()


def time_left(context: dict, task: Task) -> int | None:
    """``left_s`` at the request's one ``now``."""
    return left_s(task, context.setdefault("now", timezone.now()))


def after(context: dict, task: Task, kind: str) -> list[int]:
    return [link.task for link in links(context, task).needs if link.kind == kind]
