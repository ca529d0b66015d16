"""A developer's pages: their work (submit, follow, cancel) and notifications."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.policies.selectors import priority_class_name, submittable_resources
from apps.portal import charts, my_work, selectors, services, task_runs
from apps.portal.filters import (
    NotificationFilter,
    ResourceFilter,
    TaskFilter,
)
from apps.portal.forms import SubmitForm
from apps.portal.session_forms import StartSessionForm
from apps.portal.views.common import allow, kept, render_page
from apps.portal.work_tables import NotificationTable, ResourceTable, TaskHistoryTable, TaskTable
from apps.sessions import services as sessions
from apps.sessions.selectors import my_sessions, open_url, shared_with_me
from apps.tasks import services as tasks
from apps.tasks.models import Channel, Task
from apps.tasks.selectors import may_cancel, queue_positions, visible_tasks

SESSIONS_SHOWN = 20


@login_required
def work(request):
    user = request.user
    mine = my_work.my_tasks(user)
    found = TaskFilter(request.GET, queryset=mine, prefix="f")
    resource_filter = ResourceFilter(
        request.GET, queryset=submittable_resources(user).filter(enabled=True), prefix="r"
    )
    waiting = list(mine.filter(state=Task.State.QUEUED))
    policies = set(
        mine.filter(state__in=Task.ACTIVE_STATES).values_list("compute_resource__policy_id", flat=True)
    )
    starting = request.method == "POST" and StartSessionForm.posted(request.POST)
    session_form = StartSessionForm(
        request.POST if starting else None,
        resources=submittable_resources(user).filter(enabled=True),
        projects=my_work.my_projects(user),
    )
    form = SubmitForm(
        request.POST if request.method == "POST" and not starting else None,
        resources=submittable_resources(user).filter(enabled=True),
        projects=my_work.my_projects(user),
    )
    if starting and session_form.is_valid():
        try:
            task = sessions.start(user=user, channel=Channel.PORTAL, **session_form.cleaned_data)
        except ValidationError as error:
            for field, errors in error.message_dict.items():
                session_form.add_error(field if field in session_form.fields else None, errors)
        else:
            messages.success(
                request,
                f"Session {task.pk} started on {task.compute_resource}; "
                "its link shows here once it is ready.",
            )
            return redirect("portal:work")
    if request.method == "POST" and not starting and form.is_valid():
        try:
            task = tasks.submit(user=user, channel=Channel.PORTAL, **form.submission())
        except ValidationError as error:
            for field, errors in error.message_dict.items():
                form.add_error(form.field_of(field), errors)
        else:
            place = queue_positions([task]).get(task.pk)
            messages.success(
                request, f"Task {task.pk} submitted to {task.compute_resource}: number {place} in line."
            )
            return redirect("portal:work")
    counts = my_work.work_counts(user)
    resource_names = sorted({name for by_resource in counts.values() for name in by_resource})
    context = {
        "task_filter": found,
        "form": form,
        "session_form": session_form,
        "sessions": [
            {
                "session": s,
                "task": s.task,
                "link": open_url(s),
                "shared": [u.username for u in s.shared_with.all()],
            }
            for s in my_sessions(user)[:SESSIONS_SHOWN]
        ],
        "shared_sessions": [
            {"session": s, "task": s.task, "link": open_url(s)} for s in shared_with_me(user)[:SESSIONS_SHOWN]
        ],
        "gateway": bool(settings.SESSION_GATEWAY_URL),
        "tasks": TaskTable(
            found.qs,
            positions=queue_positions(waiting),
            borrowed=selectors.borrowed_gpus(policies),
            prefix="tasks-",
        ),
        "resources": ResourceTable(kept(my_work.my_resources(user), resource_filter, lambda r: r[0].pk)),
        "resource_filter": resource_filter,
        "charts": [
            charts.bars(
                "my-work",
                "My tasks by state and compute resource",
                resource_names,
                {
                    state: [by_resource.get(name, 0) for name in resource_names]
                    for state, by_resource in counts.items()
                },
                y_title="tasks",
                stacked=True,
                empty="You have no tasks yet.",
            )
        ],
    }
    tables = [context["tasks"], context["resources"]]
    return render_page(
        request,
        "portal/work.html",
        context,
        tables,
        [found, resource_filter],
        status=400 if form.errors or session_form.errors else 200,
    )


def _visible_task(request, pk: int) -> Task:
    task = get_object_or_404(
        Task.objects.select_related("compute_resource__policy__group", "pool", "array"), pk=pk
    )
    allow(visible_tasks(request.user).filter(pk=pk).exists(), f"Task {pk} is not yours to see.")
    return task


@login_required
def task_detail(request, pk: int):
    task = _visible_task(request, pk)
    history = TaskHistoryTable(my_work.task_history(task), exclude=("task", "compute_resource"))
    context = {
        "task": task,
        "place": queue_positions([task]).get(task.pk),
        "priority_class": priority_class_name(task.priority),
        "borrowed": selectors.borrowed_gpus({task.compute_resource.policy_id}).get(task.pk),
        "may_cancel": may_cancel(request.user, task) and task.state not in Task.FINAL_STATES,
        "history": history,
        "time": task_runs.time_facts(task, timezone.now()),
        "links": task_runs.dependency_facts(task),
        "array": task_runs.array_facts(task),
    }
    return render_page(request, "portal/task.html", context, [history])


@login_required
@require_POST
def cancel(request, pk: int):
    task = get_object_or_404(Task.objects.select_related("compute_resource__policy"), pk=pk)
    allow(may_cancel(request.user, task), f"You may not cancel task {pk}.")
    tasks.cancel(task, actor=request.user)
    messages.success(request, f"Task {pk}: cancel requested.")
    return redirect("portal:task", pk=pk)


@login_required
def notifications(request):
    found = NotificationFilter(request.GET, queryset=my_work.notifications(request.user))
    table = NotificationTable(found.qs, prefix="notifications-")
    context = {"notification_filter": found, "table": table}
    return render_page(
        request, "portal/notifications.html", context, [table], status=200 if found.is_valid() else 400
    )


@login_required
@require_POST
def notification_read(request, pk: int):
    mine = my_work.notifications(request.user).filter(pk=pk)
    if not mine.exists():
        raise Http404("No such notification of yours.")
    if request.POST.get("unread"):
        services.mark_unread(mine)
    else:
        services.mark_read(mine)
    return redirect("portal:notifications")


@login_required
@require_POST
def notifications_read_all(request):
    count = services.mark_read(my_work.notifications(request.user))
    messages.success(request, f"{count} notifications marked read.")
    return redirect("portal:notifications")
