"""What worker daemons send and get back. GPU amounts travel as decimal strings."""

import json
import math

from django.core.validators import ProhibitNullCharactersValidator
from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.fields import (
    ExactlyOneOf,
    GpuAmountField,
    PlainDecimalField,
    PlainIntegerField,
    StrictBooleanField,
    StrictCharField,
)
from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS
from apps.pools.models import TaskLog, Worker
from apps.tasks.services.time_limits import left_s
from klique.worker.hostnames import HOSTNAME_PATTERN, MAX_HOSTNAME_CHARS, hostname_error
from klique.worker.text import storable

MAX_TASKS_PER_WORKER = 10_000
MAX_GPUS_PER_WORKER = 1024
MAX_GPU_STATS_BYTES = 16_384
MAX_START_ERROR_CHARS = 2_000
MAX_RUNNING_ON_ENROL = 1_000
MAX_SESSIONS_PER_HEARTBEAT = 1_000
MAX_SESSION_URL_CHARS = 2_000
MAX_CPU_PERCENT = 100.0 * 4096  # a process tree's CPU share: 100 per busy core


def gpu_amount(**kwargs) -> serializers.DecimalField:
    return GpuAmountField(min_value=0, **kwargs)


class HostnameField(StrictCharField):
    """An RFC 1123 host name (``klique.worker.hostnames``): no spaces, controls or bidi marks."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        error = hostname_error(value)
        if error:
            raise serializers.ValidationError(error)
        return value


class HostnameFieldSchema(OpenApiSerializerFieldExtension):
    """The host name rule in the schema: its pattern (which refuses NUL too) and length."""

    target_class = HostnameField
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        return {**schema, "pattern": HOSTNAME_PATTERN}


class EnrolSerializer(serializers.Serializer):
    hostname = HostnameField(max_length=MAX_HOSTNAME_CHARS)
    gpus = gpu_amount()
    mode = serializers.ChoiceField(choices=Worker.Mode.choices, default=Worker.Mode.PROCESS)
    version = StrictCharField(max_length=40, required=False, default="", allow_blank=True)
    running = serializers.ListField(
        child=PlainIntegerField(min_value=1),
        max_length=MAX_RUNNING_ON_ENROL,
        default=list,
        help_text="Tasks an earlier daemon of this host left running here that this one can keep "
        "following; those its previous worker still held come back as ``adopted``.",
    )


def free_within_gpus(data: dict, worker: Worker) -> dict:
    """A worker cannot report more free GPUs than it has (the ``gpus`` sent along, else its own):
    neither as ``free_gpus`` (heartbeat, claim) nor as more ``slots`` than GPUs (claim)."""
    free, slots, total = data.get("free_gpus"), data.get("slots"), data.get("gpus", worker.gpus)
    if free is not None and free > total:
        raise serializers.ValidationError(
            {"free_gpus": [f"{free} free GPUs is more than this worker's {total} GPUs."]}
        )
    if slots is not None and len(slots) > total:
        raise serializers.ValidationError(
            {"slots": [f"{len(slots)} slots is more than this worker's {total} GPUs."]}
        )
    return data


class MeasureField(serializers.FloatField):
    """A finite JSON number (never a string, a boolean, NaN or infinity), or null."""

    default_error_messages = {"number": "Send a finite number or null."}

    def __init__(self, **kwargs):
        super().__init__(allow_null=True, required=False, default=None, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
            self.fail("number")
        return super().to_internal_value(data)


class SessionSampleSerializer(serializers.Serializer):
    """What a daemon measured of one session (docs/sessions.md); null: not measured."""

    url = StrictCharField(max_length=MAX_SESSION_URL_CHARS, allow_null=True, required=False, default=None)
    ready = StrictBooleanField(default=False)
    cpu_percent = MeasureField(min_value=0, max_value=MAX_CPU_PERCENT, help_text="CPU of its process tree.")
    gpu_util = MeasureField(min_value=0, max_value=100, help_text="Utilisation of its GPUs (NVML), percent.")
    net_bytes = PlainIntegerField(
        min_value=0, max_value=2**63 - 1, allow_null=True, required=False, default=None
    )
    connections = PlainIntegerField(
        min_value=0, max_value=1_000_000, allow_null=True, required=False, default=None
    )
    last_activity = serializers.DateTimeField(allow_null=True, required=False, default=None)
    sampled_at = serializers.DateTimeField()

    def validate_url(self, value):
        if value is not None and not value.startswith(("http://", "https://")):
            raise serializers.ValidationError("Send an http:// or https:// URL, or null.")
        return value


MAX_TASK_ID_DIGITS = 18  # a task id is a bigint


def _is_task_id(key) -> bool:
    return isinstance(key, str) and 0 < len(key) <= MAX_TASK_ID_DIGITS and key.isascii() and key.isdigit()


class SessionsField(serializers.DictField):
    """Samples by task id (a JSON object's keys are strings: "12")."""

    def __init__(self, **kwargs):
        super().__init__(child=SessionSampleSerializer(), required=False, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            if len(data) > MAX_SESSIONS_PER_HEARTBEAT:
                raise serializers.ValidationError(f"At most {MAX_SESSIONS_PER_HEARTBEAT} sessions.")
            bad = [key for key in data if not _is_task_id(key)]
            if bad:
                key = str(bad[0])
                shown = key if len(key) <= MAX_TASK_ID_DIGITS else f"{key[:MAX_TASK_ID_DIGITS]}..."
                reason = (
                    f'Not a task id: send the id as a string of 1 to {MAX_TASK_ID_DIGITS} digits, e.g. "12".'
                )
                raise serializers.ValidationError({shown: [reason]})
        return {int(key): value for key, value in super().to_internal_value(data).items()}


class HeartbeatSerializer(serializers.Serializer):
    tasks = serializers.ListField(
        child=PlainIntegerField(min_value=1), max_length=MAX_TASKS_PER_WORKER, default=list
    )
    gpus = gpu_amount(required=False)
    free_gpus = gpu_amount(required=False)
    gpu_stats = serializers.ListField(
        child=serializers.DictField(), max_length=MAX_GPUS_PER_WORKER, required=False
    )
    sessions = SessionsField(
        help_text="What the daemon measured of its sessions, by task id. Samples of tasks that are not "
        "this worker's active sessions are ignored."
    )

    def validate_gpu_stats(self, value):
        if len(json.dumps(value)) > MAX_GPU_STATS_BYTES:
            raise serializers.ValidationError(f"At most {MAX_GPU_STATS_BYTES} bytes of GPU stats.")
        return value

    def validate(self, data):
        return free_within_gpus(data, self.context["worker"])


class ClaimSerializer(ExactlyOneOf, serializers.Serializer):
    one_of = ("slots", "free_gpus")
    slots = serializers.ListField(
        child=PlainDecimalField(max_digits=4, decimal_places=3, min_value=0, max_value=1),
        max_length=MAX_GPUS_PER_WORKER,
        required=False,
        help_text="The free share of each GPU (1 = idle); the claimed tasks get slots on them.",
    )
    free_gpus = gpu_amount(
        required=False, help_text="A plain total, for a worker whose scheduler picks GPUs."
    )
    max_tasks = PlainIntegerField(min_value=1, max_value=100, default=1)
    multi_node = StrictBooleanField(
        default=False,
        help_text="This worker runs tasks on several nodes (Kubernetes, Slurm); with free_gpus, such a "
        "task takes GPUs x nodes of it. Without it (or with slots) multi-node tasks are left to others.",
    )

    def validate(self, data):
        return free_within_gpus(self.exactly_one(data), self.context["worker"])


class RuntimeSerializer(serializers.Serializer):
    image = serializers.CharField(help_text="spec.image, else the profile's default image, else empty.")
    namespace = serializers.CharField(
        help_text="Kubernetes namespace: the pool's, or <namespace>-<group> per group; empty if none set."
    )
    gpu_resource = serializers.CharField(
        help_text="nvidia.com/gpu for whole GPUs; for a fraction the extended resource mapped for the "
        "profile on this pool (e.g. nvidia.com/mig-1g.10gb); empty without GPUs or mapping."
    )
    gpu_count = serializers.IntegerField(help_text="How many of gpu_resource per node.")
    memory_limit_mb = serializers.IntegerField(allow_null=True, help_text="The profile's memory cap.")
    grace_s = serializers.FloatField(help_text="Seconds between SIGTERM and SIGKILL when it is stopped.")


class LabelsSerializer(serializers.Serializer):
    task = serializers.CharField()
    pool = serializers.CharField(help_text="The pool's id.")
    group = serializers.CharField()
    project = serializers.CharField()
    user = serializers.CharField()


class ClaimedTaskSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="task.pk")
    name = serializers.CharField(source="task.name")
    command = serializers.CharField(source="task.command")
    spec = serializers.JSONField(source="task.spec")
    gpus = serializers.DecimalField(
        source="task.gpus", max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES
    )
    nodes = serializers.IntegerField(source="task.nodes", help_text="Nodes; gpus is per node.")
    slots = serializers.ListField(child=serializers.IntegerField())
    checkpoint = serializers.BooleanField(source="task.checkpoint")
    preemption_count = serializers.IntegerField(source="task.preemption_count")
    placed_at = serializers.DateTimeField(source="task.placed_at")
    labels = LabelsSerializer(help_text="Labels for the work: valid Kubernetes label values.")
    runtime = RuntimeSerializer()
    session = serializers.DictField(
        allow_null=True,
        help_text="A session's block (kind, token, base_url, ready_path, command for a port kind, "
        "sample_s); null for a batch task. See docs/sessions.md.",
    )
    time_limit_s = serializers.SerializerMethodField(
        help_text="Running seconds the work has left before its time limit (its limit less the running "
        "time of earlier runs, and of this run for adopted work; at least 1): the daemon stops it "
        "then. Null: no limit."
    )
    array_index = serializers.IntegerField(
        source="task.array_index", allow_null=True, help_text="Its index in its array; null: no array."
    )

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_time_limit_s(self, claimed) -> int | None:
        left = left_s(claimed.task, timezone.now())
        return None if left is None else max(1, left)


class StartedSerializer(serializers.Serializer):
    at = serializers.DateTimeField(required=False, help_text="When it started, by the worker's clock.")
    detail = serializers.DictField(child=StrictCharField(max_length=200), required=False, default=dict)

    def validate_detail(self, value):
        if len(value) > 20:
            raise serializers.ValidationError("At most 20 entries.")
        return value


class StoredTextField(StrictCharField):
    """Text from the work itself (its output, the error that kept it from starting): NUL and lone
    surrogates are stored as U+FFFD (``storable``), never refused, so the report that carries it
    (an exit, say) is always recorded."""

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, allow_blank=True, **kwargs)
        # cleaned, not refused: so the schema gives it no pattern against NUL (apps.core.fields)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]

    def to_internal_value(self, data):
        return storable(super().to_internal_value(data))


class LogTailField(StoredTextField):
    def __init__(self, **kwargs):
        super().__init__(max_length=TaskLog.MAX_CHARS * 4, **kwargs)


class ExitedSerializer(serializers.Serializer):
    exit_code = PlainIntegerField(min_value=-(2**31), max_value=2**31 - 1, help_text="128 + N: signal N.")
    at = serializers.DateTimeField(required=False)
    log_tail = LogTailField(required=False)
    timed_out = StrictBooleanField(
        required=False,
        help_text="The work was stopped at its time limit: by the daemon, Slurm (TIMEOUT) or Kubernetes "
        "(DeadlineExceeded). The task ends timed_out.",
    )


class StoppedSerializer(serializers.Serializer):
    at = serializers.DateTimeField(required=False)
    log_tail = LogTailField(required=False)


class StartFailedSerializer(serializers.Serializer):
    at = serializers.DateTimeField(required=False)
    error = StoredTextField(
        max_length=MAX_START_ERROR_CHARS,
        required=False,
        default="",
        help_text="Why it could not start, e.g. [Errno 7] Argument list too long.",
    )


class LogSerializer(serializers.Serializer):
    tail = LogTailField()


class CheckpointSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When the work last checkpointed, by the worker's clock.")


# The answers, for the published schema.


class EnrolledSerializer(serializers.Serializer):
    worker = serializers.IntegerField()
    pool = serializers.CharField()
    pool_id = serializers.IntegerField(
        help_text="The pool's id, as the ``pool`` label of its tasks' work: a restarted daemon removes "
        "only its own pool's leftover work."
    )
    token = serializers.CharField(help_text="The worker token, shown in this answer only.")
    heartbeat_s = serializers.FloatField()
    heartbeat_timeout_s = serializers.FloatField()
    claim_max_s = serializers.FloatField(
        help_text="The longest an idle daemon goes between claims, when longer than its own --poll-max."
    )
    tunnel = serializers.CharField(
        allow_null=True,
        help_text="The session gateway's tunnel URL (ws:// or wss://): the daemon keeps a tunnel open "
        "there, through which people open its sessions; null: no gateway, sessions are opened directly.",
    )
    adopted = ClaimedTaskSerializer(
        many=True, help_text="The tasks of ``running`` this worker keeps following, as claimed."
    )


class TunnelSerializer(serializers.Serializer):
    worker = serializers.IntegerField(help_text="The worker whose token opened the tunnel.")


class StopCommandSerializer(serializers.Serializer):
    stop = serializers.IntegerField(help_text="The task to stop.")
    reason = serializers.CharField(
        help_text="preempted (the task goes back to its queue), canceled, or orphaned (no longer yours)."
    )
    why = serializers.CharField(required=False, help_text="The stop reason: reclaim, budget, canceled, ...")
    grace_s = serializers.FloatField(help_text="Seconds between SIGTERM and SIGKILL.")


class HeartbeatAnswerSerializer(serializers.Serializer):
    worker = serializers.IntegerField()
    state = serializers.CharField()
    commands = StopCommandSerializer(many=True)
    heartbeat_s = serializers.FloatField()
    heartbeat_timeout_s = serializers.FloatField()
    claim_max_s = serializers.FloatField(
        help_text="The longest an idle daemon goes between claims, when longer than its own --poll-max."
    )


class ClaimAnswerSerializer(serializers.Serializer):
    tasks = ClaimedTaskSerializer(many=True)


class ReportAnswerSerializer(serializers.Serializer):
    task = serializers.IntegerField()
    state = serializers.CharField()
    yours = serializers.BooleanField(help_text="The task is still this worker's to run.")
