"""Lending quota between the groups under a department (or a business unit): whoever may split
its quota lends for a date on the portal; ``apps.policies.loans`` applies it, checked and audited."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render

from apps.accounts.models import Group
from apps.core.errors import form_refusal
from apps.governance.forms import LendForm
from apps.policies import loans
from apps.policies.models import QuotaLoan
from apps.policies.split import may_split_quota
from apps.portal.views.common import allow, group_or_404, policy_of


@login_required
def lend(request, slug: str):
    group = group_or_404(slug)
    allow(may_split_quota(request.user, group), f"Only those who split the quota of {group} lend within it.")
    groups = Group.objects.filter(parent=group, policy__isnull=False).order_by("name")
    form = LendForm(request.POST or None, groups=groups)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                loan = loans.lend(
                    policy_of(data["lender"]),
                    policy_of(data["borrower"]),
                    what=data["what"],
                    amount=data["amount"],
                    until=data["until"],
                    period=data["period"],
                    note=data["note"],
                    actor=request.user,
                    via=QuotaLoan.Via.PORTAL,
                )
            except PermissionDenied as error:
                form.add_error(None, str(error))
            except ValidationError as error:
                form_refusal(form, error)
            else:
                messages.success(request, f"Lent: {loan}. It goes back automatically then.")
                return redirect("portal:department", slug=group.slug)
        status = 400
    return render(request, "portal/lend.html", {"group": group, "form": form}, status=status)
