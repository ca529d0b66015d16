"""The worker API under ``/api/v1/workers/``: enrol, heartbeat, claim and the task reports.

Thin: each view validates its body and calls one service. A worker token acts for its own pool
only: another pool's task answers 403. Reports are idempotent and answer the task's state. A lost
worker's claim answers 409 until it heartbeats again.
"""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, AuthenticationFailed, PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.throttles import ScopedThrottle
from apps.pools.models import Worker
from apps.sessions.selectors import tunnel_url
from apps.tasks.models import Task
from apps.workers import heartbeats, services
from apps.workers.api import serializers
from apps.workers.api.authentication import (
    EnrolmentTokenAuthentication,
    HasEnrolmentToken,
    IsWorker,
    WorkerTokenAuthentication,
)
from klique.worker.slots import milli


def _valid(serializer_class, request) -> dict:
    serializer = serializer_class(data=request.data, context={"worker": request.auth})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class EnrolView(APIView):
    """Exchange the pool's enrolment token for a worker token (shown in this answer only). A daemon
    restarted on the same host names the work it found still running (``running``); what its
    previous worker held comes back as ``adopted`` and stays its own, the rest is requeued."""

    authentication_classes = [EnrolmentTokenAuthentication]
    permission_classes = [HasEnrolmentToken]
    error_statuses = {"post": (403,)}
    throttle_classes = [ScopedThrottle]
    throttle_scope = "enrol"

    @extend_schema(request=serializers.EnrolSerializer, responses={201: serializers.EnrolledSerializer})
    def post(self, request):
        data = _valid(serializers.EnrolSerializer, request)
        now = timezone.now()
        try:
            worker, token, adopted = services.enrol_adopting(request.auth, now=now, **data)
        except services.InvalidToken as error:
            raise PermissionDenied("This enrolment token can no longer be used.") from error
        told = heartbeats.timing()
        return Response(
            {
                "worker": worker.pk,
                "pool": worker.pool.name,
                "pool_id": worker.pool_id,
                "token": token,
                "heartbeat_s": told.interval_s,
                "heartbeat_timeout_s": told.timeout_s,
                "claim_max_s": told.interval_s,
                "tunnel": tunnel_url() or None,
                "adopted": serializers.ClaimedTaskSerializer(adopted, many=True).data,
            },
            status=status.HTTP_201_CREATED,
        )


class WorkerLost(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "worker_lost"
    default_detail = (
        "This worker was marked lost (silent past the heartbeat timeout) and its tasks were "
        "requeued. Send a heartbeat first: it makes the worker active again and names the tasks "
        "to stop; then claim."
    )


class WorkerView(APIView):
    authentication_classes = [WorkerTokenAuthentication]
    permission_classes = [IsWorker]
    throttle_classes = [ScopedThrottle]
    throttle_scope = "worker"


class TunnelView(WorkerView):
    """The session gateway asks, with a daemon's worker token, which worker opens a tunnel."""

    throttle_scope = "heartbeat"

    @extend_schema(responses=serializers.TunnelSerializer)
    def get(self, request):
        return Response({"worker": request.auth.pk})


class HeartbeatView(WorkerView):
    """I am alive, running these tasks; the answer carries stop commands."""

    throttle_scope = "heartbeat"  # its own count: a busy daemon's claims never crowd it out

    @extend_schema(request=serializers.HeartbeatSerializer, responses=serializers.HeartbeatAnswerSerializer)
    def post(self, request):
        data = _valid(serializers.HeartbeatSerializer, request)
        try:
            return Response(services.heartbeat(request.auth, now=timezone.now(), **data))
        except services.InvalidToken as error:
            raise AuthenticationFailed("This worker was retired; enrol again.") from error


class ClaimView(WorkerView):
    """Claim the next placed tasks of this worker's pool that fit its free GPUs."""

    error_statuses = {"post": (409,)}

    @extend_schema(request=serializers.ClaimSerializer, responses=serializers.ClaimAnswerSerializer)
    def post(self, request):
        data = _valid(serializers.ClaimSerializer, request)
        free = [milli(share) for share in data["slots"]] if "slots" in data else None
        try:
            claimed = services.claim(
                request.auth,
                free=free,
                free_gpus=data.get("free_gpus"),
                max_tasks=data["max_tasks"],
                multi_node=data["multi_node"],
                now=timezone.now(),
            )
        except services.NotActive as error:
            if error.state == Worker.State.LOST:
                raise WorkerLost from error
            raise AuthenticationFailed("This worker was retired; enrol again.") from error
        return Response({"tasks": serializers.ClaimedTaskSerializer(claimed, many=True).data})


class TaskReportView(WorkerView):
    """A report about one task: validate the body with ``serializer_class``, call ``service``."""

    serializer_class = None
    service = None
    error_statuses = {"post": (403,)}
    # Text from the work itself, cleaned by its field (``StoredTextField``) rather than refused.
    cleaned_text_fields = ("log_tail", "tail", "error")

    def get_serializer_class(self):
        return self.serializer_class

    @extend_schema(responses=serializers.ReportAnswerSerializer)
    def post(self, request, task_id: int):
        data = _valid(self.serializer_class, request)
        worker = request.auth
        try:
            task = self.service(worker, task_id, now=timezone.now(), **data)
        except (Task.DoesNotExist, services.NotThisPool) as error:
            # The same answer whether the task exists elsewhere or not at all.
            raise PermissionDenied(f"Task {task_id} is not a task of pool {worker.pool}.") from error
        held = task.worker_id == worker.pk and task.state in Task.ACTIVE_STATES
        return Response({"task": task.pk, "state": task.state, "yours": held})


def _report(serializer_class, service):
    return TaskReportView.as_view(serializer_class=serializer_class, service=service)


started = _report(serializers.StartedSerializer, services.report_started)
exited = _report(serializers.ExitedSerializer, services.report_exited)
stopped = _report(serializers.StoppedSerializer, services.report_stopped)
start_failed = _report(serializers.StartFailedSerializer, services.report_start_failed)
log = _report(serializers.LogSerializer, services.report_log)
checkpoint = _report(serializers.CheckpointSerializer, services.report_checkpoint)
