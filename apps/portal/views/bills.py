"""Finance's cloud bill page (``/finance/bills/``): import a month's AWS CUR 2.0 file, read the
month's reconciliation per pool (what Klique charged, what the bill says, the difference and its
causes, instance by instance) and, in a closed month, book a pool's difference as an adjustment.
Finance and IT at the organisation's root; the rules are ``apps.cloud.bills`` and
``apps.cloud.bill_reconcile``'s."""

from datetime import date, timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.cloud import bill_reconcile, bills
from apps.cloud.bills import MONTH, month_of
from apps.cloud.models import CloudBill, CloudPool
from apps.ledger.closed import month_after
from apps.portal.views.common import allow

FIGURES = ("klique", "bill", "difference", "unmatched", "missing", "price", "hours")
REFUSED = "Only finance and IT of the whole organisation reconcile the cloud bill."


class ImportForm(forms.Form):
    file = forms.FileField(help_text="An AWS Cost and Usage Report 2.0 file: CSV, gzip'd CSV or Parquet.")
    month = forms.RegexField(
        regex=MONTH, widget=forms.TextInput(attrs={"type": "month"}), help_text="YYYY-MM"
    )


def _month(request) -> date:
    text = request.GET.get("month") or request.POST.get("month") or ""
    if MONTH.match(text):
        return month_of(text)
    latest = CloudBill.objects.order_by("-month").values_list("month", flat=True).first()
    return latest or timezone.now().date().replace(day=1)


@login_required
def bills_page(request, status: int = 200, form: ImportForm | None = None):
    allow(bills.may_reconcile(request.user), REFUSED)
    month = _month(request)
    found = bill_reconcile.reconcile(month)
    context = {
        "month": month,
        "previous": (month - timedelta(days=1)).replace(day=1),
        "next": month_after(month),
        "form": form or ImportForm(initial={"month": f"{month:%Y-%m}"}),
        "found": found,
        "totals": {name: found.total(name) for name in FIGURES} if found else {},
        "imports": CloudBill.objects.select_related("imported_by")[:20],
    }
    return render(request, "portal/bills.html", context, status=status)


def _back(month: date):
    return redirect(f"{reverse('portal:bills')}?month={month:%Y-%m}")


@login_required
@require_POST
def import_bill(request):
    allow(bills.may_reconcile(request.user), REFUSED)
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return bills_page(request, status=400, form=form)
    month = month_of(form.cleaned_data["month"])
    try:
        bill = bills.import_bill(
            form.cleaned_data["file"], month, actor=request.user, via=CloudBill.Via.PORTAL
        )
    except ValidationError as error:
        for field, reasons in error.message_dict.items():
            form.add_error(field if field in form.fields else None, reasons)
        return bills_page(request, status=400, form=form)
    messages.success(
        request, f"{bill.file_name}: {bill.rows_kept} lines of EC2 instance usage of {month:%B %Y} imported."
    )
    return _back(month)


@login_required
@require_POST
def book(request):
    allow(bills.may_reconcile(request.user), REFUSED)
    text = request.POST.get("month", "")
    cloud_pool = CloudPool.objects.filter(pk=request.POST.get("pool") or 0).select_related("pool").first()
    if not MONTH.match(text) or cloud_pool is None:
        messages.error(request, "Choose a month (YYYY-MM) and a cloud pool to book.")
        return bills_page(request, status=400)
    try:
        booking = bill_reconcile.book(cloud_pool, month_of(text), actor=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(m for found in error.message_dict.values() for m in found))
        return bills_page(request, status=400)
    messages.success(
        request,
        f"Booked {booking.amount} {booking.currency} for {cloud_pool.pool.name} in "
        f"{booking.adjustment.booked_in:%B %Y}: an adjustment of {booking.month:%B %Y}.",
    )
    return _back(booking.month)
