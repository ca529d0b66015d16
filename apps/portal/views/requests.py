"""Change requests in the portal: file one for a group, list mine and those I decide, decide one."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.core.errors import form_refusal
from apps.governance import selectors, services
from apps.governance.forms import DecisionForm, RequestForm
from apps.governance.models import ChangeRequest
from apps.governance.tables import ChangeRequestTable
from apps.policies.models import ResourcePolicy
from apps.policies.services import QuotaChanged
from apps.portal.views.common import allow, group_or_404, render_page


@login_required
def requests(request):
    mine = ChangeRequestTable(selectors.requests_of(request.user), prefix="mine-")
    to_decide = ChangeRequestTable(
        selectors.requests_to_decide(request.user), prefix="decide-", exclude=("approver", "decision_comment")
    )
    context = {"mine": mine, "to_decide": to_decide}
    return render_page(request, "governance/requests.html", context, [mine, to_decide])


@login_required
def request_new(request, slug: str):
    group = group_or_404(slug)
    allow(selectors.may_ask(request.user, group), f"You may not ask for changes to {group}.")
    policy = ResourcePolicy.objects.filter(group=group).first()
    form = RequestForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                services.file_request(
                    requester=request.user,
                    group=group,
                    kind=data["kind"],
                    justification=data["justification"],
                    reservation=data["reservation"],
                    limit=data["limit"],
                    budget_hours=data["budget_hours"],
                    budget_period=data["budget_period"],
                    profile=data["profile"],
                    name=data["name"],
                    lender=data["lender"],
                    loan_until=data["loan_until"],
                )
            except ValidationError as error:
                form_refusal(form, error)
            else:
                messages.success(request, f"Your request for {group} is filed and waits for a decision.")
                return redirect("portal:requests")
        status = 400
    return render(
        request,
        "governance/request_new.html",
        {"group": group, "policy": policy, "form": form},
        status=status,
    )


def _detail(request, change: ChangeRequest, form=None, *, conflict: str = "", status: int = 200):
    policy = ResourcePolicy.objects.filter(group=change.group).first()
    may_decide = change.state == ChangeRequest.State.PENDING and selectors.may_decide(request.user, change)
    if form is None and may_decide:
        form = DecisionForm(initial={"version": policy.version if policy else None})
    context = {
        "change": change,
        "policy": policy,
        "form": form if may_decide else None,
        "may_withdraw": change.state == ChangeRequest.State.PENDING
        and change.requester_id == request.user.pk,
        "conflict": conflict,
    }
    return render(request, "governance/request.html", context, status=status)


@login_required
def request_detail(request, pk: int):
    return _detail(request, get_object_or_404(selectors.visible_requests(request.user), pk=pk))


@login_required
@require_POST
def request_decide(request, pk: int):
    change = get_object_or_404(ChangeRequest, pk=pk)
    allow(
        selectors.may_decide(request.user, change),
        "Only the owner of the envelope above decides this request.",
    )
    form = DecisionForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.decide(
                change,
                actor=request.user,
                decision=data["decision"],
                values=form.values(),
                comment=data["comment"],
                version=data["version"],
            )
        except QuotaChanged as changed:
            return _detail(request, change, conflict=changed.message, status=409)
        except ValidationError as error:
            form_refusal(form, error)
        else:
            change.refresh_from_db()
            messages.success(
                request, f"The request for {change.group} is {change.get_state_display().lower()}."
            )
            return redirect("portal:requests")
    return _detail(request, change, form, status=400)


@login_required
@require_POST
def request_withdraw(request, pk: int):
    change = get_object_or_404(ChangeRequest, pk=pk)
    allow(change.requester_id == request.user.pk, "Only the requester withdraws a request.")
    try:
        services.withdraw(change, actor=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, "Request withdrawn.")
    return redirect("portal:requests")
