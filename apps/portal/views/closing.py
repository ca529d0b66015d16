"""Finance's month close: close an ended month (its figures freeze), reopen the latest closed one
with a reason, look for late usage corrections. Finance, leadership and IT see the page (the
adjustments of the groups they may see); IT and finance at the organisation's root act. The rules
are ``apps.ledger.closing``'s."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.accounts.selectors import managed_group_ids
from apps.core.numbers import hours
from apps.ledger import closed, closing
from apps.ledger.models import Adjustment, MonthClose, MonthCloseEvent
from apps.ledger.statement_forms import MonthForm
from apps.portal import access
from apps.portal.views.common import allow


def _errors(error: ValidationError) -> str:
    return " ".join(message for messages_ in error.message_dict.values() for message in messages_)


@login_required
def months(request, status: int = 200):
    allow(access.may_see_finance(request.user), "Only finance, leadership and IT see the month close.")
    adjustments = Adjustment.objects.select_related("group", "project", "gpu_type", "actor")
    if (managed := managed_group_ids(request.user)) is not None:
        adjustments = adjustments.filter(group_id__in=managed)
    context = {
        "months": closed.month_states(timezone.now()),
        "may_close": closed.may_close_months(request.user),
        "events": MonthCloseEvent.objects.select_related("close", "actor")[:20],
        "adjustments": [
            (adjustment, hours(adjustment.gpu_us))
            for adjustment in adjustments.filter(voided_at__isnull=True).order_by("-at", "-pk")[:50]
        ],
    }
    return render(request, "portal/months.html", context, status=status)


def _may_act(request) -> None:
    allow(
        closed.may_close_months(request.user),
        "Only IT and finance of the whole organisation close and reopen months.",
    )


@login_required
@require_POST
def close_month(request):
    _may_act(request)
    form = MonthForm(request.POST)
    if not request.POST.get("month"):
        messages.error(request, "month: give the month to close as YYYY-MM.")
        return months(request, status=400)
    if not form.is_valid():
        errors = (f"{name}: {' '.join(found)}" for name, found in form.errors.items())
        messages.error(request, "; ".join(errors))
        return months(request, status=400)
    try:
        close = closing.close_month(form.cleaned_data["month"], actor=request.user)
    except ValidationError as error:
        messages.error(request, _errors(error))
        return months(request, status=400)
    messages.success(request, f"{close.month:%B %Y} is closed: its figures are frozen.")
    return redirect("portal:months")


@login_required
@require_POST
def reopen_month(request, pk: int):
    _may_act(request)
    close = get_object_or_404(MonthClose, pk=pk, reopened_at__isnull=True)
    try:
        closing.reopen_month(close, actor=request.user, reason=request.POST.get("reason", ""))
    except ValidationError as error:
        messages.error(request, _errors(error))
        return months(request, status=400)
    messages.success(request, f"{close.month:%B %Y} is open again: it is priced on read.")
    return redirect("portal:months")


@login_required
@require_POST
def sweep(request):
    _may_act(request)
    made = closing.sweep(actor=request.user)
    messages.success(request, f"Late corrections found: {len(made)} adjustment line(s) booked.")
    return redirect("portal:months")
