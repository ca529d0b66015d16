"""The what-if page for IT (docs/whatif.md, "The what-if page"): the saved runs and the form of a new
one; a run's progress (polled by ``static/klique/whatif.js``), its two sides side by side with
charts, and its CSV. IT admins only (403 for everyone else); the live estate is only read."""

import csv

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from apps.portal import charts
from apps.portal.access import may_see_it
from apps.portal.views.common import allow, render_page
from apps.whatif import no_difference, runs, selectors, services
from apps.whatif.forms import RunForms, initial_of, presets
from apps.whatif.models import WhatIfRun
from apps.whatif.services import RunError
from apps.whatif.tables import RunTable, change_group_slugs, comparison, describe, period, scope

REFUSED = "Only IT admins run what-ifs."


def _it_only(request) -> None:
    allow(may_see_it(request.user), REFUSED)


def _run_or_404(pk: int) -> WhatIfRun:
    run = selectors.run(pk)
    if run is None:
        raise Http404("No such what-if run.")
    return run


@login_required
def whatif(request):
    """The saved runs and the new-run form; ``?again=ID`` fills the form with a saved run's."""
    _it_only(request)
    now = timezone.now()
    initial, rows = None, None
    again = request.GET.get("again", "")
    if request.method != "POST" and again.isdigit():
        initial, rows = initial_of(_run_or_404(int(again)))
    forms = RunForms(request.POST if request.method == "POST" else None, now=now, initial=initial, rows=rows)
    status = 200
    if request.method == "POST":
        run_request = forms.request()
        if run_request is not None:
            try:
                run = services.start_run(request.user, run_request)
            except RunError as error:
                forms.refused(error)
            else:
                messages.success(request, f"{run} is queued.")
                return redirect("portal:whatif-run", run.pk)
        status = 400
    runs = RunTable(selectors.runs(), prefix="runs-")
    context = {"forms": forms, "form": forms.form, "rows": forms.rows, "runs": runs, "presets": presets(now)}
    return render_page(request, "whatif/whatif.html", context, [runs], status=status)


def _names(report: dict) -> dict[str, str]:
    return selectors.group_names(report["base"]["groups"])


def _charts(report: dict, names: dict[str, str]) -> list[charts.Chart]:
    """p95 wait and GPU-hours per group, utilisation per pool: as recorded and changed. A figure
    with no number (a group with no task) is drawn as 0."""
    groups = list(report["base"]["groups"])
    pools = list(report["base"]["pools"])
    sides = {"as recorded": report["base"], "changed": report["changed"]}

    def per_group(metric):
        return {label: [side["groups"][g][metric] or 0 for g in groups] for label, side in sides.items()}

    x = [names.get(g, g) for g in groups]
    return [
        charts.bars("whatif-wait", "p95 wait per group", x, per_group("wait_p95_s"), y_title="seconds"),
        charts.bars(
            "whatif-gpu-hours", "GPU-hours per group", x, per_group("gpu_hours"), y_title="GPU-hours"
        ),
        charts.bars(
            "whatif-utilization",
            "Utilisation per pool",
            pools,
            {label: [side["pools"][p]["utilization"] * 100 for p in pools] for label, side in sides.items()},
            y_title="%",
        ),
    ]


@login_required
def run_detail(request, pk: int):
    _it_only(request)
    runs.fail_stale_runs()
    run = _run_or_404(pk)
    context = {
        "run": run,
        "period": period(run),
        "scope": scope(run),
        "changes": describe(run.changes or {}, selectors.group_names(change_group_slugs(run.changes or {}))),
        "status_url": reverse("portal:whatif-status", args=[run.pk]),
    }
    if run.state == WhatIfRun.State.DONE and run.report:
        names = _names(run.report)
        context["tables"] = comparison(run.report, names)
        context["charts"] = _charts(run.report, names)
        context["no_difference"] = no_difference.sentences(run.report, names)
    return render(request, "whatif/run.html", context)


@require_GET
@login_required
def run_status(request, pk: int):
    """The run's state and progress as JSON, for the page's poller."""
    _it_only(request)
    runs.fail_stale_runs()
    run = _run_or_404(pk)
    return JsonResponse(
        {
            "state": run.state,
            "state_display": run.get_state_display(),
            "progress": run.progress,
            "tasks": run.tasks,
            "finished": run.finished,
            "error": run.error,
        }
    )


@login_required
def run_csv(request, pk: int):
    """The comparison as CSV (``to_csv_rows``): 404 until the run is done."""
    _it_only(request)
    run = _run_or_404(pk)
    if run.state != WhatIfRun.State.DONE or not run.report:
        raise Http404("This run has no comparison yet.")
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="whatif-{run.pk}.csv"'
    csv.writer(response).writerows(selectors.csv_rows(run))
    return response
