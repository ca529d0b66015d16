"""The tasks of a recorded period as a scenario's submits and cancels (``apps.engine.export``):
each task's size, run time, user, project, kind, checkpoint and priority, and issue 35's fields.

- Time limits: a task's ``time_limit_s`` less what it ran before the period (its usage intervals),
  at most its compute resource's maximum as exported (lowered, with a note). A task without one
  gets the compute resource's default or maximum in the replay, as a submit would today (noted).
  Work that ended timed out runs on in the export until its limit stops it in the replay.
- Dependencies: ``after_ok`` / ``after_any`` on the exported tasks it runs after. A dependency that
  ended before the period is settled and left out; one outside the export (another group's work,
  a task left out) is left out with a note. A task canceled because an ``after_ok`` failed gets no
  cancel event when that dependency is exported: the replay cancels it itself.
- Arrays with ``max_running``: one submit with ``array`` (its size) and ``max_running``, id
  ``a<array id>``, so its tasks are ``a<array id>[<index>]``; its tasks that ended before the period
  are canceled at its submit. The scenario gives an array's tasks one run time: the mean of those
  that ran (noted where they differ). Arrays without a cap are exported task by task.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from apps.core.gpus import to_milli
from apps.ledger.models import UsageInterval
from apps.tasks.models import Task, TaskDependency

US = timedelta(microseconds=1)
OWNER_STOPS = ("", Task.StopReason.CANCELED)


def _num(value) -> int | float:
    d = Decimal(value)
    return int(d) if d == d.to_integral_value() else float(d)


def _seconds(span: timedelta) -> int | float:
    return _num(Decimal(span // US) / 1_000_000)


def array_task_id(array_id: int, index: int) -> str:
    return f"a{array_id}[{index}]"


def database_ids(task_ids, start: datetime) -> dict[str, int]:
    """The database id of each exported task id; an array's tasks that had ended before the period
    (canceled at the array's submit) are left out."""
    out, wanted = {}, defaultdict(dict)
    for task_id in task_ids:
        if task_id.startswith("a"):
            array, index = task_id[1:].rstrip("]").split("[")
            wanted[int(array)][int(index)] = task_id
        else:
            out[task_id] = int(task_id)
    if wanted:
        rows = Task.objects.filter(array_id__in=list(wanted)).exclude(ended_at__lte=start)
        for pk, array, index in rows.values_list("pk", "array_id", "array_index"):
            if index in wanted[array]:
                out[wanted[array][index]] = pk
    return out


def max_time_limit(resource) -> int | None:
    """The longest time limit a submit may ask for there: the compute resource's, else its profile's."""
    own = resource.max_time_limit_s
    return own if own is not None else resource.profile.max_time_limit_s


def resolves_limit(resource) -> bool:
    return (
        resource.default_time_limit_s is not None
        or resource.profile.default_time_limit_s is not None
        or max_time_limit(resource) is not None
    )


class TaskEvents:
    """The task part of ``export._Export``: it brings ``start``, ``end``, ``notes``, ``event``,
    ``at`` and ``_limit_at``."""

    def _tasks(self, resources) -> list[Task]:
        """In scope: submitted in the period, or before it and not ended at its start."""
        return list(
            Task.objects.filter(compute_resource__in=resources, submitted_at__lt=self.end)
            .exclude(ended_at__lte=self.start)
            .select_related("compute_resource__profile", "user", "project", "array")
            .order_by("submitted_at", "pk")
        )

    def _task_events(self, tasks: list[Task], from_task: dict[int, bool]) -> None:
        intervals = defaultdict(list)
        rows = (
            UsageInterval.objects.filter(task__in=tasks)
            .order_by("start", "pk")
            .values_list("task_id", "start", "end")
        )
        for task_id, start, end in rows:
            intervals[task_id].append((start, end))
        self.counts = defaultdict(int)
        kept = []
        for t in tasks:
            size = to_milli(t.counted_gpus)
            if size > self._limit_at(t.compute_resource.policy_id, max(t.submitted_at, self.start)):
                self.counts["too_large"] += 1
            elif size == 0 and from_task[t.compute_resource.profile_id]:
                self.counts["empty"] += 1  # the simulator takes a size from a task only above 0
            else:
                kept.append(t)
        ids = {t.pk: self._scenario_id(t) for t in kept}
        needs = self._needs(kept, ids)
        arrays: dict[int, list[Task]] = defaultdict(list)
        for t in kept:
            if ids[t.pk] != str(t.pk):
                arrays[t.array_id].append(t)
                continue
            submitted = max(t.submitted_at, self.start)
            body = self._body(t, ids[t.pk], intervals[t.pk], submitted, needs.get(t.pk, {}))
            self.event(submitted, 1, {"submit": body})
            self._cancel(t, ids[t.pk], intervals[t.pk], needs.get(t.pk, {}))
        for members in arrays.values():
            self._array(members, ids, intervals, needs)
        self._task_notes()

    def _scenario_id(self, t: Task) -> str:
        if t.array_id is not None and t.array.max_running is not None and t.kind == Task.Kind.BATCH:
            return array_task_id(t.array_id, t.array_index)
        return str(t.pk)

    def _body(self, t: Task, task_id: str, runs, submitted: datetime, needs: dict) -> dict:
        size = to_milli(t.counted_gpus)
        body = {"id": task_id, "resource": t.compute_resource.name, "gpus": _num(Decimal(size) / 1000)}
        body["duration_s"] = _seconds(self._duration(t, runs, submitted))
        body["user"] = t.user.username
        if t.project_id:
            body["project"] = t.project.name
        if t.kind == Task.Kind.SESSION:
            body["kind"] = "session"
            if not body["duration_s"]:
                del body["duration_s"]  # a session's is > 0 or left out (it runs until stopped)
        else:
            body["checkpoint"] = t.checkpoint
            limit = self._time_limit(t, runs)
            if limit is not None:
                body["time_limit_s"] = limit
        if t.priority:
            body["priority"] = t.priority
        body.update(needs)
        return body

    def _time_limit(self, t: Task, runs) -> int | None:
        resource = t.compute_resource
        if t.time_limit_s is None:
            if resolves_limit(resource):
                self.counts["gains_limit"] += 1
            return None
        ran = sum(
            ((min(end or self.start, self.start) - start) for start, end in runs if start < self.start),
            timedelta(),
        )
        limit = max(1, t.time_limit_s - max(0, int(ran.total_seconds())))
        most = max_time_limit(resource)
        if most is not None and limit > most:
            self.counts["limit_lowered"] += 1
            return most
        return limit

    def _needs(self, kept: list[Task], ids: dict[int, str]) -> dict[int, dict]:
        """Each exported task's ``after_ok`` / ``after_any`` on exported tasks, in id order."""
        links = (
            TaskDependency.objects.filter(task__in=kept)
            .order_by("task_id", "needs_id")
            .values_list("task_id", "needs_id", "kind", "needs__ended_at")
        )
        out: dict[int, dict] = defaultdict(dict)
        for task_id, needs_id, kind, ended_at in links:
            if needs_id in ids:
                out[task_id].setdefault(kind, []).append(ids[needs_id])
            elif ended_at is None or ended_at > self.start:
                self.counts["dependency_outside"] += 1
        return out

    def _cancel(self, t: Task, task_id: str, runs, needs: dict) -> None:
        if not self._canceled(t, runs) or t.ended_at >= self.end:
            return
        if t.stop_reason == Task.StopReason.DEPENDENCY_FAILED and needs.get("after_ok"):
            return  # the replay cancels it when the dependency it needs fails there
        self.event(t.ended_at, 2, {"cancel": task_id})

    def _array(self, members: list[Task], ids: dict[int, str], intervals, needs: dict) -> None:
        """A capped array's one submit; its tasks that ended before the period canceled at once."""
        first = members[0]
        submitted = max(min(t.submitted_at for t in members), self.start)
        ran = [t for t in members if not self._canceled(t, intervals[t.pk])] or members
        durations = [self._duration(t, intervals[t.pk], submitted) for t in ran]
        own = needs.get(first.pk, {})
        body = self._body(first, f"a{first.array_id}", intervals[first.pk], submitted, own)
        if "duration_s" in body:
            body["duration_s"] = _seconds(sum(durations, timedelta()) / len(durations))
            if len(set(durations)) > 1:
                self.counts["array_mean"] += 1
        body["array"] = first.array.size
        body["max_running"] = first.array.max_running
        self.event(submitted, 1, {"submit": body})
        inside = {t.array_index for t in members}
        for index in range(first.array.size):
            if index not in inside:
                self.event(submitted, 2, {"cancel": array_task_id(first.array_id, index)})
        for t in members:
            self._cancel(t, ids[t.pk], intervals[t.pk], needs.get(t.pk, {}))

    def _task_notes(self) -> None:
        texts = {
            "too_large": "{} task(s) larger than their policy's limit at their submit",
            "empty": "{} task(s) of no GPUs on a profile that takes sizes from its tasks",
            "limit_lowered": "{} time limit(s) above their compute resource's maximum (lowered to it)",
            "gains_limit": "{} task(s) without a time limit (the replay gives them their compute resource's)",
            "dependency_outside": "{} dependency(ies) on tasks outside the export",
            "array_mean": "{} array(s) given the mean run time of their tasks",
        }
        for key, text in texts.items():
            if self.counts[key]:
                self.notes.append(text.format(self.counts[key]))

    @staticmethod
    def _canceled(t: Task, runs) -> bool:
        """Ended without finishing: canceled by its owner, or ended (failed) before it ever ran."""
        if t.ended_at is None:
            return False
        if t.state == Task.State.CANCELED and t.stop_reason in OWNER_STOPS:
            return True
        return not runs and t.state in Task.FINAL_STATES

    def _duration(self, t: Task, runs, submitted: datetime) -> timedelta:
        """Its run time: the last interval's length (all of them for checkpointed work), less what
        ran before the period. Canceled or never-ran work: from its submit to its end (the cancel
        stops it there). Work not ended when the period ends, or stopped at its time limit: to the
        period's end (the replay's limit stops it)."""
        if self._canceled(t, runs):
            return t.ended_at - submitted
        if t.state not in Task.FINAL_STATES or not runs or runs[-1][1] is None:
            return self.end - submitted
        if t.state == Task.State.TIMED_OUT:
            return self.end - submitted
        counted = runs if t.checkpoint and t.kind != Task.Kind.SESSION else runs[-1:]
        total = sum(((end - start) for start, end in counted), timedelta())
        before = sum(
            ((min(end, self.start) - start) for start, end in counted if start < self.start), timedelta()
        )
        return max(total - before, timedelta())
