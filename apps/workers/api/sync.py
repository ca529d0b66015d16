"""``POST /api/v1/workers/sync``: one round trip per daemon poll (docs/workers.md, "The sync call").

The body carries the daemon's reports, its heartbeat and its claim, each optional; they are done
in that order in one transaction (``apps.workers.services.sync``) with the semantics of their own
endpoints. A report refused (another pool's task: 403; a body that does not validate: 400) is
answered in its place and the others go on. The envelope itself is checked by hand, which is
cheaper than a serializer for the call every daemon makes every few seconds, and so are plainly
valid heartbeat and claim bodies (``apps.workers.api.bodies``); its errors are 400 and name the
path (``reports[3].what``, ``heartbeat.gpus``).

``answer`` is the call: the URL serves it through ``apps.workers.api.lean`` (a plain Django view
for a daemon's well-formed request), and through ``SyncView`` (DRF: the schema, and whatever the
plain view leaves to it).
"""

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers as drf
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.response import Response

from apps.pools.models import Worker
from apps.workers import services
from apps.workers.api import bodies, serializers
from apps.workers.api.views import WorkerLost, WorkerView
from klique.worker.slots import milli

REPORT_SERIALIZERS = {
    "started": serializers.StartedSerializer,
    "exited": serializers.ExitedSerializer,
    "stopped": serializers.StoppedSerializer,
    "start_failed": serializers.StartFailedSerializer,
    "log": serializers.LogSerializer,
    "checkpoint": serializers.CheckpointSerializer,
}
MAX_TASK_ID = 2**63 - 1
RETIRED = "This worker was retired; enrol again."


def _flatten(detail, path: str) -> dict[str, list[str]]:
    """DRF's nested errors as {"heartbeat.gpus": [...]}."""
    if isinstance(detail, dict):
        found = {}
        for key, value in detail.items():
            name = path if key == "non_field_errors" else f"{path}.{key}"
            found.update(_flatten(value, name))
        return found
    if isinstance(detail, list) and detail and not all(isinstance(item, str) for item in detail):
        found = {}
        for index, value in enumerate(detail):
            found.update(_flatten(value, f"{path}[{index}]"))
        return found
    return {path: [str(item) for item in detail] if isinstance(detail, list) else [str(detail)]}


def _validated(serializer_class, data, worker: Worker, path: str, errors: dict) -> dict | None:
    serializer = serializer_class(data=data, context={"worker": worker})
    if serializer.is_valid():
        return serializer.validated_data
    errors.update(_flatten(serializer.errors, path))
    return None


def _object(body, path: str, errors: dict) -> bool:
    if isinstance(body, dict):
        return True
    errors[path] = ["Send a JSON object."]
    return False


def _envelope(body, worker: Worker) -> tuple[list[tuple[int, str, object]], dict | None, dict | None]:
    """The reports as (task, what, body), the heartbeat's and the claim's validated bodies; or
    ValidationError (400) naming each bad path. A report's own body is checked later, alone."""
    errors: dict[str, list[str]] = {}
    if not isinstance(body, dict):
        raise ValidationError({"non_field_errors": ["Send a JSON object."]})
    unknown = sorted(set(body) - {"reports", "heartbeat", "claim"})
    for key in unknown:
        errors[key] = ["Unknown field: send reports, heartbeat and claim."]
    reports, raw_reports = [], body.get("reports")
    ceiling = settings.WORKER_SYNC_MAX_REPORTS
    if raw_reports is None:
        raw_reports = []
    elif not isinstance(raw_reports, list):
        errors["reports"] = ["Send a list of reports."]
        raw_reports = []
    elif len(raw_reports) > ceiling:
        errors["reports"] = [f"At most {ceiling} reports in one sync (WORKER_SYNC_MAX_REPORTS)."]
        raw_reports = []
    for index, report in enumerate(raw_reports):
        path = f"reports[{index}]"
        if not _object(report, path, errors):
            continue
        task, what, report_body = report.get("task"), report.get("what"), report.get("body", {})
        if isinstance(task, bool) or not isinstance(task, int) or not 1 <= task <= MAX_TASK_ID:
            errors[f"{path}.task"] = ["Send the task's id, a whole number of 1 or more."]
        if not isinstance(what, str) or what not in REPORT_SERIALIZERS:
            errors[f"{path}.what"] = [f"Send one of {', '.join(REPORT_SERIALIZERS)}."]
        _object(report_body, f"{path}.body", errors)
        for key in sorted(set(report) - {"task", "what", "body"}):
            errors[f"{path}.{key}"] = ["Unknown field: send task, what and body."]
        reports.append((task, what, report_body))
    heartbeat = claim = None
    if body.get("heartbeat") is not None and _object(body["heartbeat"], "heartbeat", errors):
        heartbeat = bodies.heartbeat(body["heartbeat"], worker) or _validated(
            serializers.HeartbeatSerializer, body["heartbeat"], worker, "heartbeat", errors
        )
    if body.get("claim") is not None and _object(body["claim"], "claim", errors):
        claim = bodies.claim(body["claim"], worker) or _validated(
            serializers.ClaimSerializer, body["claim"], worker, "claim", errors
        )
    if errors:
        raise ValidationError(errors)
    return reports, heartbeat, claim


def _claim_arguments(data: dict) -> dict:
    return {
        "free": [milli(share) for share in data["slots"]] if "slots" in data else None,
        "free_gpus": data.get("free_gpus"),
        "max_tasks": data["max_tasks"],
        "multi_node": data["multi_node"],
    }


class SyncReportSerializer(drf.Serializer):
    task = drf.IntegerField(min_value=1, max_value=MAX_TASK_ID)
    what = drf.ChoiceField(choices=list(REPORT_SERIALIZERS))
    body = drf.DictField(
        required=False, help_text="The body of that report's own endpoint (workers/tasks/<id>/<what>)."
    )


class SyncSerializer(drf.Serializer):
    reports = SyncReportSerializer(
        many=True, required=False, allow_null=True, help_text="Done first, in this order."
    )
    heartbeat = serializers.HeartbeatSerializer(required=False, allow_null=True)
    claim = serializers.ClaimSerializer(required=False, allow_null=True)


class SyncReportAnswerSerializer(drf.Serializer):
    task = drf.IntegerField()
    what = drf.CharField()
    state = drf.CharField(required=False, help_text="The task's state after the report.")
    yours = drf.BooleanField(required=False, help_text="The task is still this worker's to run.")
    status = drf.IntegerField(required=False, help_text="400 or 403 when the report was refused.")
    error = drf.CharField(required=False)


class ClaimErrorSerializer(drf.Serializer):
    status = drf.IntegerField()
    error = drf.CharField()


class SyncAnswerSerializer(drf.Serializer):
    reports = SyncReportAnswerSerializer(many=True)
    heartbeat = serializers.HeartbeatAnswerSerializer(allow_null=True)
    tasks = serializers.ClaimedTaskSerializer(many=True)
    claim_error = ClaimErrorSerializer(allow_null=True)


def _body_error(errors) -> str:
    return "; ".join(f"{path}: {' '.join(reasons)}" for path, reasons in _flatten(errors, "body").items())


def answer(worker: Worker, body) -> dict:
    """The answer to a sync of ``body`` (the parsed JSON) by ``worker``; ``ValidationError`` (400)
    for a bad envelope, ``AuthenticationFailed`` (401) for a retired worker."""
    reports, heartbeat, claim = _envelope(body, worker)
    answers: list[dict | None] = []
    valid: list[tuple[str, int, dict]] = []
    for task, what, report in reports:
        serializer = REPORT_SERIALIZERS[what](data=report, context={"worker": worker})
        if serializer.is_valid():
            answers.append(None)
            valid.append((what, task, serializer.validated_data))
        else:
            error = _body_error(serializer.errors)
            answers.append({"task": task, "what": what, "status": 400, "error": error})
    try:
        synced = services.sync(
            worker,
            reports=valid,
            heartbeat=heartbeat,
            claim=None if claim is None else _claim_arguments(claim),
            now=timezone.now(),
        )
    except services.InvalidToken as error:
        raise AuthenticationFailed(RETIRED) from error
    done = iter(zip(valid, synced.reports, strict=True))
    for index, report_answer in enumerate(answers):
        if report_answer is not None:
            continue
        (what, task, _), result = next(done)
        if isinstance(result, services.NotThisPool):
            error = f"Task {task} is not a task of pool {worker.pool}."
            answers[index] = {"task": task, "what": what, "status": 403, "error": error}
        else:
            answers[index] = {"task": task, "what": what, "state": result.state, "yours": result.yours}
    claim_error = None
    if synced.claim_error is not None:
        if synced.claim_error.state != Worker.State.LOST:
            raise AuthenticationFailed(RETIRED)
        claim_error = {"status": WorkerLost.status_code, "error": str(WorkerLost.default_detail)}
    tasks = serializers.ClaimedTaskSerializer(synced.claimed, many=True).data if synced.claimed else []
    return {"reports": answers, "heartbeat": synced.heartbeat, "tasks": tasks, "claim_error": claim_error}


class SyncView(WorkerView):
    """Reports, then heartbeat, then claim, in one call and one transaction."""

    throttle_scope = "sync"
    error_statuses = {"post": (400,)}

    @extend_schema(request=SyncSerializer, responses=SyncAnswerSerializer)
    def post(self, request):
        return Response(answer(request.auth, request.data))
