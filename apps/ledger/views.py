"""The usage report page and its CSV and XLSX exports. Thin: the form reads the parameters, the
selectors decide what the viewer may see and compute the figures."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django_tables2 import RequestConfig

from apps.ledger import exports, selectors, visibility
from apps.ledger.forms import ReportForm
from apps.ledger.tables import UsageTable

EXPORTS = {"csv": exports.csv_response, "xlsx": exports.xlsx_response}


def _link(request, **changes) -> str:
    query = request.GET.copy()
    for name, value in changes.items():
        query[name] = value
    query.pop("page", None)
    return "?" + query.urlencode()


@login_required
def report(request):
    form = ReportForm(request.GET)
    context = {
        "form": form,
        "scope": visibility.scope(request.user),
        "estate_view": visibility.may_see_unused_capacity(request.user),
    }
    status = 200
    if form.is_valid():
        spec = form.spec()
        reason = visibility.refusal(request.user, spec)
        if reason:
            raise PermissionDenied(reason)
        export = request.GET.get("export", "")
        if export and export not in EXPORTS:
            return HttpResponseBadRequest("export: use csv or xlsx.")
        usage = selectors.usage_report(request.user, spec)
        if export:
            return EXPORTS[export](usage)
        table = UsageTable(usage)
        RequestConfig(request, paginate={"per_page": 100}).configure(table)
        context.update(
            report=usage,
            table=table,
            csv=_link(request, export="csv"),
            xlsx=_link(request, export="xlsx"),
            by_group="group" in spec.dims,
            leaves_csv=_link(request, export="csv", rows="leaves"),
            leaves_xlsx=_link(request, export="xlsx", rows="leaves"),
        )
        if form.cleaned_data["period"] != "custom":
            context["previous"] = _link(request, date=(spec.start - timedelta(days=1)).date().isoformat())
            context["next"] = _link(request, date=spec.end.date().isoformat())
    else:
        status = 400
    form.fields["group"].queryset = visibility.visible_groups(request.user)
    form.fields["project"].queryset = visibility.visible_projects(request.user)
    return render(request, "ledger/report.html", context, status=status)
