"""Monthly statements per group (PDF, CSV) and the per-cost-centre cut for ERP import. The access
rule is the reports' own (``visibility.refusal`` and what the viewer may see)."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render

from apps.ledger import cost_centres, statements, visibility
from apps.ledger.statement_forms import MonthForm, StatementForm


def _bad_request(form) -> HttpResponseBadRequest:
    return HttpResponseBadRequest(
        "; ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items()),
        content_type="text/plain; charset=utf-8",
    )


def _attachment(body, content_type: str, name: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def _own_group(user, offered: list):
    """The group a statement is first offered for: the viewer's own (the first they belong to),
    else the first they may see."""
    own = set(user.memberships.values_list("group_id", flat=True))
    return next((g for g in offered if g.pk in own), offered[0])


@login_required
def statement(request):
    """The statement form, or with ``format=pdf|csv`` the statement itself."""
    form = StatementForm(request.GET or None)
    offered = list(form.fields["group"].queryset.filter(pk__in=visibility.visible_groups(request.user)))
    # The page offers the viewer's groups; another group is refused with 403, like the reports. One
    # of them is chosen from the start, so PDF or CSV at once gives a statement, not a 400.
    form.fields["group"].widget.choices = [(g.slug, g.name) for g in offered] or [("", "—")]
    if offered and not request.GET.get("group"):
        form.initial["group"] = _own_group(request.user, offered).slug
    wanted = request.GET.get("format")
    if form.is_bound and not form.is_valid():
        if wanted:
            return _bad_request(form)
        return render(request, "ledger/statements.html", {"form": form}, status=400)
    if not wanted:
        return render(request, "ledger/statements.html", {"form": form})
    data = form.cleaned_data
    spec = statements.statement_spec(data["group"], data["month"], data["currency"], data["idle"])
    reason = visibility.refusal(request.user, spec)
    if reason:
        raise PermissionDenied(reason)
    found = statements.statement(request.user, spec)
    if data["format"] == "csv":
        return _attachment(statements.csv_text(found), "text/csv; charset=utf-8", found.filename("csv"))
    return _attachment(statements.pdf_bytes(found), "application/pdf", found.filename("pdf"))


@login_required
def cost_centre_cut(request):
    """``?month=2026-04&currency=EUR``: the month's figures per cost centre and GPU type, as CSV."""
    form = MonthForm(request.GET)
    if not form.is_valid():
        return _bad_request(form)
    spec = cost_centres.month_spec(form.cleaned_data["month"], form.cleaned_data["currency"])
    reason = visibility.refusal(request.user, spec)
    if reason:
        raise PermissionDenied(reason)
    body = cost_centres.csv_text(cost_centres.lines(request.user, spec))
    name = f"cost-centres-{spec.start:%Y-%m}-{spec.currency}.csv"
    return _attachment(body, "text/csv; charset=utf-8", name)
