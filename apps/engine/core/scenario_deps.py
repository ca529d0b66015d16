"""A scenario's arrays and dependencies (issue 35), checked by path like any input.

- `array` N (1 to ARRAY_MAX) on a submit makes N tasks of its spec, ids "ID[0]" to "ID[N-1]" in
  index order, submitted at the same time; `max_running` (>= 1, only with `array`) caps how many of
  them are placed at once. The array's id names it: a `cancel` of it cancels each of its tasks, and
  in `after_ok` / `after_any` it stands for all of them.
- `after_ok` / `after_any` list task (or array) ids of the scenario, submitted before or after the
  task that waits for them. Unknown ids, an id listed twice (an array and one of its tasks count as
  twice), a task waiting for itself and cycles are refused, naming the first entry at fault.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from decimal import Decimal

from .scenario_model import Event, ScenarioError, Submit
from .scenario_values import read_count, read_list, read_name

ISSUE_35 = ("time_limit_s", "after_ok", "after_any", "array", "max_running")
ARRAY_MAX = 10000
KINDS = ("after_ok", "after_any")


def read_ids(v, field: str) -> tuple[str, ...]:
    return tuple(read_name(x, f"{field}[{i}]") for i, x in enumerate(read_list(v, field)))


def array_tasks(one: Submit, o: dict, field: str, submitted: set[str]) -> list[Submit]:
    """The submit's task, or its array's N tasks."""
    if "array" not in o:
        if "max_running" in o:
            raise ScenarioError(f"{field}.max_running: only an array (array: N) has a max_running")
        return [one]
    n = o["array"]
    if isinstance(n, bool) or not isinstance(n, int | Decimal) or n != int(n) or not 1 <= n <= ARRAY_MAX:
        raise ScenarioError(f"{field}.array: must be a whole number of tasks from 1 to {ARRAY_MAX}")
    most = o.get("max_running")
    if most is not None:
        most = read_count(most, f"{field}.max_running")
        if most < 1:
            raise ScenarioError(f"{field}.max_running: must be a whole number >= 1")
    tasks = []
    for k in range(int(n)):
        task = f"{one.id}[{k}]"
        if task in submitted:
            raise ScenarioError(f"{field}.id: task {task!r} of array {one.id!r} is submitted twice")
        tasks.append(replace(one, id=task, array=one.id, max_running=most))
    return tasks


def check_dependencies(
    events: list[Event], fields: dict[str, str], arrays: dict[str, tuple[str, ...]]
) -> tuple[Event, ...]:
    """The events, each submit's dependencies checked and an array's id replaced by its tasks.
    `fields`: each task id's submit path; `arrays`: each array's tasks."""
    needs: dict[str, list[tuple[str, str, int]]] = {}  # task -> (task it needs, list, index there)
    out = list(events)
    for n, e in enumerate(events):
        s = e.what
        if not isinstance(s, Submit) or not (s.after_ok or s.after_any):
            continue
        field, seen, expanded = fields[s.id], set(), {}
        for kind in KINDS:
            got = []
            for j, ref in enumerate(getattr(s, kind)):
                path = f"{field}.{kind}[{j}]"
                if ref not in fields and ref not in arrays:
                    raise ScenarioError(f"{path}: unknown task {ref!r}")
                for one in arrays.get(ref, (ref,)):
                    if one == s.id:
                        raise ScenarioError(f"{path}: task {s.id!r} would wait for itself")
                    if one in seen:
                        raise ScenarioError(f"{path}: task {one!r} is listed twice")
                    seen.add(one)
                    got.append(one)
                    needs.setdefault(s.id, []).append((one, kind, j))
            expanded[kind] = tuple(got)
        out[n] = Event(e.at_us, replace(s, **expanded))
    if needs:
        _refuse_cycles(needs, fields)
    return tuple(out)


def _refuse_cycles(needs: dict[str, list[tuple[str, str, int]]], fields: dict[str, str]) -> None:
    """Peel off every task whose needs all end (those with none first); what is left waits on a
    cycle: name the first entry, in submit order, that lies on one."""
    left = {task: len(ns) for task, ns in needs.items()}
    dependants: dict[str, list[str]] = {}
    for task, ns in needs.items():
        for one, _, _ in ns:
            dependants.setdefault(one, []).append(task)
    ready = deque(task for task in fields if task not in needs)
    while ready:
        done = ready.popleft()
        for task in dependants.get(done, ()):
            left[task] -= 1
            if not left[task]:
                ready.append(task)
    stuck = {task for task, n in left.items() if n}
    for task in needs:
        if task not in stuck:
            continue
        for one, kind, j in needs[task]:
            path = _path(one, task, needs, stuck)
            if path is not None:
                cycle = " -> ".join([task, *path])
                raise ScenarioError(f"{fields[task]}.{kind}[{j}]: a cycle: {cycle}")


def _path(start: str, goal: str, needs: dict, stuck: set[str]) -> list[str] | None:
    """The shortest chain of needs from start to goal, both included; None if there is none."""
    before = {start: None}
    todo = deque([start])
    while todo:
        task = todo.popleft()
        if task == goal:
            path = []
            while task is not None:
                path.append(task)
                task = before[task]
            return path[::-1]
        for one, _, _ in needs.get(task, ()):
            if one in stuck and one not in before:
                before[one] = task
                todo.append(one)
    return None
