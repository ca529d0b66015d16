"""Tasks and schedules over the API. Every write goes through ``apps.tasks.services`` as the
requesting user; the channel comes from the ``X-Klique-Channel`` header (default ``api``)."""

from contextlib import contextmanager

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from apps.accounts.api.authentication import agent_of
from apps.core.errors import refusal
from apps.sessions import services as sessions
from apps.sessions.api.work.filters import ScheduleFilter, TaskFilter
from apps.sessions.api.work.schedules import ScheduleDetailSerializer, ScheduleSerializer
from apps.sessions.api.work.serializers import (
    ArraySubmitSerializer,
    ArraySubmittedSerializer,
    BulkSubmitSerializer,
    SubmitSerializer,
    TaskDetailSerializer,
    TaskSerializer,
    submit_allowed,
)
from apps.sessions.selectors import sessions_of
from apps.tasks import selectors, services
from apps.tasks.models import Channel, Schedule, Task


class TaskCheckpointSerializer(serializers.Serializer):
    task = serializers.IntegerField(read_only=True)
    at = serializers.DateTimeField(
        required=False,
        help_text="When the work checkpointed (default now): not ahead of now, not before its run's start.",
    )


CHANNEL_HEADER = "X-Klique-Channel"
CLIENT_CHANNELS = [Channel.API, Channel.CLI, Channel.SDK, Channel.MCP]
CHANNEL_PARAMETER = OpenApiParameter(
    CHANNEL_HEADER,
    location=OpenApiParameter.HEADER,
    enum=[str(c) for c in CLIENT_CHANNELS],
    description="The channel the request comes from; recorded on the task.",
)


def channel_of(request) -> str:
    value = request.headers.get(CHANNEL_HEADER, Channel.API).strip().lower()
    if value not in CLIENT_CHANNELS:
        allowed = ", ".join(CLIENT_CHANNELS)
        raise serializers.ValidationError({CHANNEL_HEADER: [f"Unknown channel {value!r}; use {allowed}."]})
    return value


@contextmanager
def refusals_as_400():
    """A service refusing input (a Django ValidationError) answers 400 with its fields."""
    try:
        yield
    except DjangoValidationError as error:
        raise refusal(error) from error


def submit_refusal(resource) -> str:
    return (
        f"You may submit only to compute resources of groups you belong to; {resource} "
        f"belongs to {resource.policy.group}."
    )


def check_may_submit(context: dict, resource) -> None:
    """403 unless the request's user may submit to the resource (the serializer's context keeps
    the answer it already got)."""
    if not submit_allowed(context, resource):
        raise PermissionDenied(submit_refusal(resource))


AGENT_SCHEDULE_REFUSED = (
    "An agent's token cannot create schedules: their runs would be its owner's, outside the agent's caps."
)
BULK_SESSION_REFUSED = (
    "A session is started on its own (POST /api/v1/tasks/); a bulk submission takes batch tasks."
)


@extend_schema_view(
    list=extend_schema(summary="Tasks you may see, newest first"),
    retrieve=extend_schema(summary="A task with its place in line, verdict and preemptions"),
)
class TaskViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your tasks; a team lead or department head also sees their groups' tasks, IT all."""

    queryset = Task.objects.none()
    filterset_class = TaskFilter

    def get_queryset(self):
        return selectors.visible_tasks(self.request.user)

    def get_serializer_class(self):
        return TaskSerializer if self.action == "list" else TaskDetailSerializer

    def _detail(self, task, status_code=status.HTTP_200_OK) -> Response:
        context = {
            **self.get_serializer_context(),
            "positions": selectors.queue_positions([task]),
            "preemptions": selectors.preemption_history(task),
            "sessions": sessions_of([task]),
            "tasks_shown": [task],
        }
        return Response(TaskDetailSerializer(task, context=context).data, status=status_code)

    def _submitted(self, tasks) -> list[dict]:
        """Just-submitted tasks as ``_detail`` shows them, from the objects the service wrote (with
        the user, resource, group, profile and project the request read): a new task has no
        pool and no preemptions yet."""
        context = {
            **self.get_serializer_context(),
            "positions": selectors.queue_positions(tasks),
            "preemptions": [],
            "sessions": sessions_of(tasks),
            "tasks_shown": tasks,
        }
        return TaskDetailSerializer(tasks, many=True, context=context).data

    def list(self, request):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        context = {
            **self.get_serializer_context(),
            "positions": selectors.queue_positions(page),
            "sessions": sessions_of(page),
            "tasks_shown": page,
        }
        return self.get_paginated_response(TaskSerializer(page, many=True, context=context).data)

    def retrieve(self, request, pk=None):
        return self._detail(self.get_object())

    @extend_schema(
        summary="Submit a task",
        request=SubmitSerializer,
        responses={201: TaskDetailSerializer},
        parameters=[CHANNEL_PARAMETER],
    )
    def create(self, request):
        channel = channel_of(request)
        context = self.get_serializer_context()
        submission = SubmitSerializer(data=request.data, context=context)
        submission.is_valid(raise_exception=True)
        check_may_submit(context, submission.validated_data["compute_resource"])
        with refusals_as_400():
            task = sessions.submit_task(
                user=request.user, channel=channel, agent=agent_of(request), **submission.validated_data
            )
        return Response(self._submitted([task])[0], status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Submit many batch tasks at once, all or none",
        request=BulkSubmitSerializer,
        responses={201: TaskDetailSerializer(many=True)},
        parameters=[CHANNEL_PARAMETER],
    )
    @action(detail=False, methods=["post"])
    def bulk(self, request):
        """Each item as ``POST tasks/`` takes it (batch tasks only), checked by the same rules; a
        refused item answers 400 ``{"tasks": {"<index>": {"<field>": [...]}}}`` and nothing is
        created. The tasks are created in the items' order and answered in it."""
        channel = channel_of(request)
        items = request.data.get("tasks") if isinstance(request.data, dict) else None
        if not isinstance(items, list):
            raise serializers.ValidationError(
                {"tasks": ['Give the tasks as a list: {"tasks": [{...}, ...]}.']}
            )
        error = services.bulk_count_error(len(items))
        if error:
            raise serializers.ValidationError({"tasks": [error]})
        context = self.get_serializer_context()
        # One serializer reads every item (as a ListSerializer's child does): its fields are built once.
        submission = SubmitSerializer(context=context)
        checked, errors = [], {}
        for index, item in enumerate(items):
            submission.initial_data = item
            try:
                data = submission.run_validation(item)
            except serializers.ValidationError as refused:
                errors[str(index)] = refused.detail
                continue
            if data["kind"] == Task.Kind.SESSION:
                errors[str(index)] = {"kind": [BULK_SESSION_REFUSED]}
            else:
                checked.append({k: v for k, v in data.items() if k != "session_kind"})
        if errors:
            raise serializers.ValidationError({"tasks": errors})
        for index, item in enumerate(checked):
            if not submit_allowed(context, item["compute_resource"]):
                raise PermissionDenied(f"Task {index}: {submit_refusal(item['compute_resource'])}")
        try:
            with refusals_as_400():
                tasks = services.submit_many(
                    user=request.user, items=checked, channel=channel, agent=agent_of(request)
                )
        except services.SubmissionsRefused as refused:
            by_index = {str(index): fields for index, fields in refused.errors.items()}
            raise serializers.ValidationError({"tasks": by_index}) from refused
        return Response(self._submitted(tasks), status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Submit an array: N batch tasks of one spec, each with its index",
        request=ArraySubmitSerializer,
        responses={201: ArraySubmittedSerializer},
        parameters=[CHANNEL_PARAMETER],
    )
    @action(detail=False, methods=["post"])
    def array(self, request):
        """The fields of ``POST tasks/`` (a batch task) and ``array`` (how many) with an optional
        ``max_running``; each task gets its index (``KLIQUE_ARRAY_INDEX``, from 0). All or none."""
        channel = channel_of(request)
        context = self.get_serializer_context()
        submission = ArraySubmitSerializer(data=request.data, context=context)
        submission.is_valid(raise_exception=True)
        data = {k: v for k, v in submission.validated_data.items() if k != "session_kind"}
        check_may_submit(context, data["compute_resource"])
        size, max_running = data.pop("array"), data.pop("max_running", None)
        with refusals_as_400():
            tasks = services.submit_array(
                user=request.user,
                size=size,
                max_running=max_running,
                channel=channel,
                agent=agent_of(request),
                **data,
            )
        answer = {"array": tasks[0].array_id, "size": size, "max_running": max_running}
        return Response({**answer, "tasks": self._submitted(tasks)}, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Cancel a task", request=None, responses=TaskDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        task = self.get_object()
        if not selectors.may_cancel(request.user, task):
            raise PermissionDenied("Only the task's owner, IT and the group's leads may cancel it.")
        services.cancel(task, actor=request.user)
        return self._detail(self.get_queryset().get(pk=task.pk))

    @extend_schema(
        summary="Report that a running task checkpointed (its lost work counts from then)",
        request=TaskCheckpointSerializer,
        responses=TaskCheckpointSerializer,
    )
    @action(detail=True, methods=["post"])
    def checkpoint(self, request, pk=None):
        """The task's owner (or an agent token acting for them) says its work checkpointed at
        ``at`` (default now); refused (400) in the future or before the current run's start."""
        task = self.get_object()
        if task.user_id != request.user.pk:
            raise PermissionDenied("Only the task's owner (or its worker) reports its checkpoints.")
        given = TaskCheckpointSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        now = timezone.now()
        with refusals_as_400():
            task = services.record_checkpoint(task, given.validated_data.get("at") or now, now=now)
        return Response({"task": task.pk, "at": task.checkpointed_at})


class ScheduleViewSet(viewsets.ModelViewSet):
    """Cron schedules that submit a task as their owner at each due time (UTC)."""

    queryset = Schedule.objects.none()
    filterset_class = ScheduleFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return selectors.visible_schedules(self.request.user)

    def get_serializer_class(self):
        return ScheduleSerializer if self.action == "list" else ScheduleDetailSerializer

    def _owned(self):
        schedule = self.get_object()
        if schedule.owner_id != self.request.user.pk:
            raise PermissionDenied("Only the schedule's owner may change it.")
        return schedule

    def perform_create(self, serializer):
        if agent_of(self.request) is not None:
            raise PermissionDenied(AGENT_SCHEDULE_REFUSED)
        data = serializer.validated_data
        check_may_submit(serializer.context, data["compute_resource"])
        with refusals_as_400():
            serializer.instance = services.create_schedule(owner=self.request.user, **data)

    def partial_update(self, request, pk=None):
        schedule = self._owned()
        serializer = self.get_serializer(schedule, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        if "compute_resource" in serializer.validated_data:
            check_may_submit(serializer.context, serializer.validated_data["compute_resource"])
        with refusals_as_400():
            schedule = services.update_schedule(schedule, **serializer.validated_data)
        return Response(self.get_serializer(self.get_queryset().get(pk=schedule.pk)).data)

    def destroy(self, request, pk=None):
        services.delete_schedule(self._owned())
        return Response(status=status.HTTP_204_NO_CONTENT)
