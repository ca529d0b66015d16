"""A sync's heartbeat and claim bodies read without building a serializer, when they are plainly
valid: the shape a daemon sends every poll. Anything else (a value of another type, a bound
passed, session samples) returns None and is read by the serializer, which gives the same data or
the errors: so a body is accepted here only where the serializer would accept it, with the same
data (``tests/workers/test_sync_lean.py`` checks both on generated bodies).

Each value is still checked by its own field (the serializer's, built once here), so its rules and
its ``Decimal`` have one owner; what is skipped is the serializer's per-call copy of its fields."""

import json

from rest_framework.exceptions import ValidationError

from apps.pools.models import Worker
from apps.workers.api import serializers

_CLAIM = serializers.ClaimSerializer().fields
FIELDS = {
    "gpus": serializers.HeartbeatSerializer().fields["gpus"],
    "free_gpus": _CLAIM["free_gpus"],
    "share": _CLAIM["slots"].child,
}
MAX_TASKS = _CLAIM["max_tasks"].max_value
# What a field read, by (field, type, value): a daemon sends the same few amounts every poll.
_read: dict[tuple, object] = {}
READ_KEPT = 4096


def _field(name: str, value):
    """``value`` read by the field ``name``; ``ValueError`` where the field refuses it."""
    key = (name, type(value), value) if type(value) in (str, int) else None  # not floats: -0.0 == 0.0
    found = _read.get(key) if key is not None else None  # one lookup: another thread may clear it
    if found is not None:
        return found
    try:
        found = FIELDS[name].run_validation(value)
    except ValidationError as error:
        raise ValueError from error
    if key is not None:
        if len(_read) >= READ_KEPT:
            _read.clear()
        _read[key] = found
    return found


def _ids(value) -> list[int]:
    if type(value) is not list or len(value) > serializers.MAX_TASKS_PER_WORKER:
        raise ValueError
    if not all(type(item) is int and item >= 1 for item in value):
        raise ValueError
    return list(value)


def _gpu_stats(value) -> list[dict]:
    if type(value) is not list or len(value) > serializers.MAX_GPUS_PER_WORKER:
        raise ValueError
    if not all(type(item) is dict for item in value):
        raise ValueError
    if len(json.dumps(value)) > serializers.MAX_GPU_STATS_BYTES:
        raise ValueError
    return [dict(item) for item in value]


def _within(data: dict, worker: Worker) -> dict:
    try:
        return serializers.free_within_gpus(data, worker)
    except ValidationError as error:
        raise ValueError from error


def heartbeat(body: dict, worker: Worker) -> dict | None:
    """``HeartbeatSerializer``'s validated data, or None: let the serializer read it."""
    try:
        data = {"tasks": _ids(body["tasks"]) if "tasks" in body else []}
        for name in ("gpus", "free_gpus"):
            if name in body:
                data[name] = _field(name, body[name])
        if "gpu_stats" in body:
            data["gpu_stats"] = _gpu_stats(body["gpu_stats"])
        if "sessions" in body:
            if body["sessions"] != {}:
                return None
            data["sessions"] = {}
        return _within(data, worker)
    except ValueError:
        return None


def claim(body: dict, worker: Worker) -> dict | None:
    """``ClaimSerializer``'s validated data, or None: let the serializer read it."""
    if ("slots" in body) == ("free_gpus" in body):
        return None
    try:
        data = {}
        if "slots" in body:
            slots = body["slots"]
            if type(slots) is not list or len(slots) > serializers.MAX_GPUS_PER_WORKER:
                return None
            data["slots"] = [_field("share", share) for share in slots]
        else:
            data["free_gpus"] = _field("free_gpus", body["free_gpus"])
        most = body.get("max_tasks", 1)
        multi_node = body.get("multi_node", False)
        if type(most) is not int or not 1 <= most <= MAX_TASKS or type(multi_node) is not bool:
            return None
        data["max_tasks"], data["multi_node"] = most, multi_node
        return _within(data, worker)
    except ValueError:
        return None
