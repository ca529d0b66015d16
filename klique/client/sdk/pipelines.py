"""Arrays and pipelines in the SDK: ``submit_array`` (N tasks of one spec, each with its index
``KLIQUE_ARRAY_INDEX``, at most ``max_running`` at once) and ``submit_pipeline`` (steps that run
after one another, sent as one bulk request, all or none)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from klique.client.sdk.errors import InvalidRequest
from klique.client.sdk.tasks import Task, _bulk_item, task_body

DEPENDENCY_KINDS = ("after_ok", "after_any")


@dataclass(frozen=True)
class TaskArray:
    """An array as submitted: its id, size, cap and its tasks in index order."""

    id: int
    size: int
    max_running: int | None
    tasks: tuple[Task, ...]

    @property
    def task_ids(self) -> list[int]:
        return [task.id for task in self.tasks]


class PipelineError(ValueError):
    """A pipeline the SDK cannot send: a step without a name, a name given twice, or a dependency
    on a step that is not an earlier one. Nothing was submitted."""


def pipeline_items(steps: Sequence[Mapping]) -> tuple[list[str], list[dict]]:
    """The steps' names and the bulk items they become: a dependency naming an earlier step
    becomes ``{"item": n}``; an integer is an existing task's id."""
    names: list[str] = []
    items = []
    for position, step in enumerate(steps):
        if not isinstance(step, Mapping):
            raise PipelineError(f"Step {position} is not a dict.")
        name = step.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PipelineError(f"Step {position} has no name; each step needs one (its task's name).")
        if name in names:
            raise PipelineError(f"Step name {name!r} is given twice.")
        item = dict(step)
        for kind in DEPENDENCY_KINDS:
            item[kind] = [_reference(names, name, kind, entry) for entry in step.get(kind) or ()]
            if not item[kind]:
                del item[kind]
        names.append(name)
        items.append(_bulk_item(item))
    return names, items


def _reference(earlier: list[str], name: str, kind: str, entry):
    if isinstance(entry, int) and not isinstance(entry, bool):
        return entry
    if isinstance(entry, str) and entry in earlier:
        return {"item": earlier.index(entry)}
    raise PipelineError(
        f"Step {name!r}: {kind} names {entry!r}, which is neither an earlier step's name nor a task id."
    )


def _by_step(error: InvalidRequest, names: list[str]) -> InvalidRequest:
    """The server's ``tasks.3.after_ok`` errors as ``steps.<name>.after_ok``."""
    errors = {}
    for field, reasons in error.errors.items():
        parts = field.split(".", 2)
        if len(parts) == 3 and parts[0] == "tasks" and parts[1].isdigit() and int(parts[1]) < len(names):
            field = f"steps.{names[int(parts[1])]}.{parts[2]}"
        errors[field] = reasons
    message = "; ".join(f"{field}: {' '.join(map(str, reasons))}" for field, reasons in errors.items())
    return InvalidRequest(error.status, message or error.message, errors)


class PipelinesApi:
    """The array and pipeline methods of ``Client`` (``tasks/array/``, ``tasks/bulk/``)."""

    def submit_array(
        self,
        compute_resource: str,
        command: str | Sequence[str],
        *,
        size: int,
        max_running: int | None = None,
        gpus: Decimal | str | int | None = None,
        nodes: int | None = None,
        project: str | None = None,
        name: str = "",
        checkpoint: bool = False,
        spec: dict | None = None,
        priority: int | str | None = None,
        time_limit_s: int | timedelta | None = None,
        after_ok: Sequence[int] | None = None,
        after_any: Sequence[int] | None = None,
    ) -> TaskArray:
        """Submit ``size`` tasks of one spec (the fields of ``submit``), each with its index in
        ``KLIQUE_ARRAY_INDEX`` (from 0); at most ``max_running`` of them placed at once (left out:
        no cap). All or none."""
        body = task_body(
            compute_resource,
            command,
            gpus=gpus,
            nodes=nodes,
            project=project,
            name=name,
            checkpoint=checkpoint,
            spec=spec,
            priority=priority,
            time_limit_s=time_limit_s,
            after_ok=after_ok,
            after_any=after_any,
        )
        body["array"] = size
        if max_running is not None:
            body["max_running"] = max_running
        answer = self._request("POST", "tasks/array/", json=body)
        tasks = tuple(Task.from_api(task) for task in answer["tasks"])
        return TaskArray(answer["array"], answer["size"], answer["max_running"], tasks)

    def submit_pipeline(self, steps: Sequence[Mapping]) -> dict[str, Task]:
        """Submit a small pipeline in one request, all or none: each step is a dict with a
        ``name`` (its task's name) and the fields of ``submit``; its ``after_ok`` / ``after_any``
        name earlier steps by name, or existing tasks by id. Returns the tasks by step name, in
        the steps' order. A refused step raises ``InvalidRequest`` with errors keyed
        ``steps.<name>.<field>``; a pipeline the SDK cannot send raises ``PipelineError``."""
        names, items = pipeline_items(steps)
        try:
            tasks = self.submit_many(items)
        except InvalidRequest as error:
            raise _by_step(error, names) from error
        return dict(zip(names, tasks, strict=True))
