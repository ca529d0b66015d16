"""``POST /api/v1/workers/wait``: a daemon with room for work waits here, instead of polling claim,
until the engine places work in its pool (``apps.tasks.wake.wait_placed``) or its timeout passes.

Each waiting daemon holds one server thread for up to ``WORKER_WAIT_MAX_S`` (run the web server
with threads: docs/deploy.md). ``WORKER_WAIT_MAX_S=0`` turns waiting off: the answer is at once
``{"placed": false}`` and daemons poll claim as before. A lost worker answers 409 and a retired
one 401, as claim does."""

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.response import Response

from apps.pools.models import Worker
from apps.tasks import wake
from apps.workers.api.views import WorkerLost, WorkerView, _valid


class SecondsField(serializers.FloatField):
    """A JSON number: DRF's field would read ``true`` as 1 and ``"5"`` as 5."""

    default_error_messages = {"invalid": 'Enter the seconds as a JSON number (5, not "5" or true).'}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class SecondsFieldSchema(OpenApiSerializerFieldExtension):
    """The wait's bounds in the schema: a number above 0, at most ``WORKER_WAIT_MAX_S`` (when set)."""

    target_class = SecondsField

    def map_serializer_field(self, auto_schema, direction):
        schema = {"type": "number", "format": "double", "minimum": 0, "exclusiveMinimum": True}
        if settings.WORKER_WAIT_MAX_S > 0:
            schema["maximum"] = settings.WORKER_WAIT_MAX_S
        return schema


class WaitSerializer(serializers.Serializer):
    timeout_s = SecondsField(
        help_text="Seconds to wait at most: more than 0, at most WORKER_WAIT_MAX_S (default 20)."
    )

    def validate_timeout_s(self, value: float) -> float:
        ceiling = settings.WORKER_WAIT_MAX_S
        if not value > 0:
            raise serializers.ValidationError("Must be more than 0 seconds.")
        if 0 < ceiling < value:
            raise serializers.ValidationError(f"Must be at most {ceiling:g} seconds (WORKER_WAIT_MAX_S).")
        return value


class WaitAnswerSerializer(serializers.Serializer):
    placed = serializers.BooleanField(help_text="True when work was placed in the pool: claim now.")


class WaitView(WorkerView):
    """Wait until work is placed in this worker's pool, or the timeout; then claim."""

    throttle_scope = "wait"  # its own count: a daemon calls it back to back
    error_statuses = {"post": (409,)}

    @extend_schema(request=WaitSerializer, responses=WaitAnswerSerializer)
    def post(self, request):
        data = _valid(WaitSerializer, request)
        worker = request.auth
        state = Worker.objects.filter(pk=worker.pk).values_list("state", flat=True).first()
        if state == Worker.State.LOST:
            raise WorkerLost
        if state != Worker.State.ACTIVE:
            raise AuthenticationFailed("This worker was retired; enrol again.")
        if settings.WORKER_WAIT_MAX_S <= 0:
            return Response({"placed": False})
        return Response({"placed": wake.wait_placed(worker.pool_id, data["timeout_s"])})
