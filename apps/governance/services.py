"""Writes of change requests: filing, deciding and withdrawing.

An approval applies through the policy services (``apps.policies.services``), like the admin, the
API and the portal's split: the policy and its parent are locked (``lock_policies``), the version
the approver saw is checked, every rule of ``apps.policies.rules`` runs, and the change is audited
as a ``PolicyChange``. The request row is locked too, so a request is decided once. If anything
is refused, nothing is saved and the request stays pending."""

from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Group, Notification, User
from apps.core import events
from apps.core.audit import record_change
from apps.core.gpus import gpu_amount_error
from apps.governance import selectors
from apps.governance.models import ChangeRequest
from apps.policies import loans
from apps.policies import services as policies
from apps.policies.models import ComputeResource, PolicyChange, Profile, QuotaLoan, ResourcePolicy
from apps.policies.rules import fmt

NOTIFICATION_KIND = Notification.Kind.CHANGE_REQUEST
QUOTA_VALUES = ("reservation", "limit", "budget_hours")
LINK = "/requests/"


class Decision:
    APPROVE = "approve"
    APPROVE_WITH_CHANGES = "approve_with_changes"
    DENY = "deny"
    CHOICES = [
        (APPROVE, "Approve as asked"),
        (APPROVE_WITH_CHANGES, "Approve with changes"),
        (DENY, "Deny"),
    ]


def _policy_of(group: Group) -> ResourcePolicy | None:
    return ResourcePolicy.objects.select_related("group").filter(group=group).first()


def _decimal(field: str, value) -> Decimal:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError) as error:
        raise ValidationError({field: "Enter a number."}) from error
    if not number.is_finite():
        raise ValidationError({field: "Enter a finite number."})
    return number


def clean_quota_values(policy: ResourcePolicy, values: dict) -> dict:
    """The asked quota values checked for shape against the policy as stored: at least one of
    reservation, limit and budget hours; GPUs as GPU amounts; no limit below the reservation it
    would have; a budget period when the policy has none. Whether they fit the parent's envelope is
    checked when they are applied. Returns {field: value} of the fields given."""
    errors: dict[str, list[str]] = {}
    found = {}
    for field in QUOTA_VALUES:
        value = values.get(field)
        if value is None or value == "":
            continue
        number = _decimal(field, value)
        if field == "budget_hours":
            if number < 0:
                errors.setdefault(field, []).append("Time budget cannot be negative.")
            elif number != number.quantize(Decimal("0.001")):
                errors.setdefault(field, []).append("Budget hours have at most 3 decimals.")
        elif gpu_amount_error(number):
            errors.setdefault(field, []).append(f"{field.capitalize()}: {gpu_amount_error(number)}")
        found[field] = number
    period = values.get("budget_period") or ""
    if period and period not in ResourcePolicy.Period.values:
        errors.setdefault("budget_period", []).append("Choose day, week or month.")
    if not found:
        errors.setdefault("reservation", []).append(
            "Ask for at least one of reservation, limit or budget hours."
        )
    if errors:
        raise ValidationError(errors)
    reservation = found.get("reservation", policy.reservation)
    limit = found.get("limit", policy.limit)
    if limit < reservation:
        raise ValidationError(
            {"limit": f"Limit ({fmt(limit)}) must be at least the reservation ({fmt(reservation)})."}
        )
    if "budget_hours" in found and not (period or policy.budget_period):
        raise ValidationError(
            {"budget_period": "Choose the budget period (day, week or month) for the time budget."}
        )
    if period:
        found["budget_period"] = period
    return found


def _notify(users, message: str) -> None:
    Notification.objects.bulk_create(
        [Notification(user=user, kind=NOTIFICATION_KIND, message=message, link=LINK) for user in users]
    )


def _values_text(values: dict) -> str:
    shown = []
    for field, value in values.items():
        label = field.replace("_", " ")
        shown.append(f"{label} {fmt(value) if isinstance(value, Decimal) else value}")
    return ", ".join(shown)


def _json(values: dict) -> dict:
    return {k: str(v.quantize(Decimal("0.001"))) if isinstance(v, Decimal) else v for k, v in values.items()}


def file_request(
    *,
    requester: User,
    group: Group,
    kind: str = ChangeRequest.Kind.QUOTA,
    justification: str,
    reservation=None,
    limit=None,
    budget_hours=None,
    budget_period: str = "",
    profile: Profile | None = None,
    name: str = "",
    lender: Group | None = None,
    loan_until=None,
    advised: bool = False,
) -> ChangeRequest:
    """File a request for ``group`` and notify the people who decide it. Refused with
    ``PermissionDenied`` when the requester may not ask for the group (``selectors.may_ask``; for a
    quota advisor's proposal, ``advised``: ``selectors.may_accept_proposal``), with
    ``ValidationError`` naming the field for bad values."""
    allowed = selectors.may_accept_proposal if advised else selectors.may_ask
    if not allowed(requester, group):
        raise PermissionDenied(f"You may not ask for changes to {group}.")
    if kind not in ChangeRequest.Kind.values:
        raise ValidationError({"kind": f"Choose one of {', '.join(ChangeRequest.Kind.values)}."})
    if not (justification or "").strip():
        raise ValidationError({"justification": "Say why the change is needed."})
    policy = _policy_of(group)
    if policy is None:
        raise ValidationError({"group": f"{group} has no resource policy yet; IT creates one in the admin."})
    request = ChangeRequest(requester=requester, group=group, kind=kind, justification=justification.strip())
    if kind == ChangeRequest.Kind.QUOTA:
        asked = clean_quota_values(
            policy,
            {
                "reservation": reservation,
                "limit": limit,
                "budget_hours": budget_hours,
                "budget_period": budget_period,
            },
        )
        for field, value in asked.items():
            setattr(request, field, value)
    elif kind == ChangeRequest.Kind.LOAN:
        _loan_request(request, policy, lender, loan_until, reservation, limit, budget_hours, budget_period)
    else:
        if profile is None:
            raise ValidationError({"profile": "Choose the profile to connect."})
        if ComputeResource.objects.filter(policy=policy, profile=profile).exists():
            raise ValidationError({"profile": f"{group} already has a compute resource on {profile}."})
        request.profile = profile
        request.name = (name or "").strip() or f"{group.slug}/{profile.name}"
        if ComputeResource.objects.filter(name=request.name).exists():
            raise ValidationError({"name": f"A compute resource named {request.name} exists already."})
    with transaction.atomic():
        request.approver_role, request.approver_group = selectors.approver_role_and_group(request)
        request.full_clean()
        request.save()
        _notify(
            selectors.approvers(request),
            f"{requester} asks for {_asked_text(request)} for {group}: {request.justification}",
        )
    return request


def _loan_request(request, policy, lender, until, reservation, limit, budget_hours, period) -> None:
    """A loan asked for ``request.group`` (the borrower) from ``lender``: one quantity, checked for
    shape as ``loans.lend`` will check it (whether it fits is checked when it is applied)."""
    if lender is None:
        raise ValidationError({"lender": "Choose the group that would lend."})
    lender_policy = _policy_of(lender)
    if lender_policy is None:
        raise ValidationError({"lender": f"{lender} has no resource policy."})
    quantities = (("reservation", reservation), ("limit", limit), ("budget_hours", budget_hours))
    given = {f: v for f, v in quantities if v is not None and v != ""}
    if len(given) != 1:
        raise ValidationError({"reservation": "A loan lends one of reservation, limit or budget hours."})
    ((what, amount),) = given.items()
    values = loans.clean_loan(
        lender_policy, policy, what=what, amount=amount, until=until, period=period, now=timezone.now()
    )
    setattr(request, what, values["amount"])
    request.budget_period = values["period"]
    request.lender, request.loan_until = lender, values["until"]


def _asked_text(request: ChangeRequest) -> str:
    if request.kind == ChangeRequest.Kind.LOAN:
        asked = _values_text(request.asked_values)
        return f"a loan of {asked} from {request.lender} until {request.loan_until:%Y-%m-%d %H:%M} UTC"
    if request.kind == ChangeRequest.Kind.COMPUTE_RESOURCE:
        return f"a new compute resource {request.name} on profile {request.profile}"
    return _values_text(request.asked_values)


def _apply_quota(request: ChangeRequest, values: dict, *, actor: User, version: int | None, via: str):
    policy = _policy_of(request.group)
    seen = None if version is None else {policy.pk: version}
    locked = policies.lock_policies([policy], versions=seen)[policy.pk]
    values = clean_quota_values(locked, values)
    before = policies.quota_of(locked)
    policies.update_policy(locked, **values)
    change = policies.record_quota_change(locked, before, actor=actor, via=via)
    return values, change


def _apply_loan(request: ChangeRequest, *, actor: User):
    """The approved loan, lent by the approver (whose right to decide stands for the right to lend)."""
    ((what, amount),) = ((f, v) for f, v in request.asked_values.items() if f in QUOTA_VALUES)
    return loans.lend(
        _policy_of(request.lender),
        _policy_of(request.group),
        what=what,
        amount=amount,
        until=request.loan_until,
        period=request.budget_period,
        note=request.justification,
        actor=actor,
        via=QuotaLoan.Via.REQUEST,
        check_permission=False,
    )


def _apply_compute_resource(request: ChangeRequest, *, actor: User, via: str):
    policy = _policy_of(request.group)
    try:
        resource = policies.connect(policy=policy, profile=request.profile, name=request.name)
    except ValidationError as error:
        if hasattr(error, "error_dict") and "name" in error.error_dict:
            raise
        raise ValidationError({"profile": error.messages}) from error
    change = record_change(
        PolicyChange, actor=actor, via=via, policy=policy, changes={"compute_resource": [None, resource.name]}
    )
    return resource, change


def decide(
    request: ChangeRequest,
    *,
    actor: User,
    decision: str,
    values: dict | None = None,
    comment: str = "",
    version: int | None = None,
    via: str = PolicyChange.Via.PORTAL,
) -> ChangeRequest:
    """Approve (the asked values), approve with changes (``values``, for a quota change) or deny
    (``comment`` required) a pending request. An approval applies atomically through the policy
    services; ``version``: the policy version the approver saw (a policy saved since refuses the
    approval with ``QuotaChanged``). A value that no longer fits (the parent's envelope shrank)
    refuses it with ``ValidationError`` naming the field. Refused: nothing saved, still pending.
    The requester is notified of the decision."""
    with transaction.atomic():
        request = (
            ChangeRequest.objects.select_for_update(no_key=True, of=("self",))
            .select_related("group", "profile", "requester", "approver_group")
            .get(pk=request.pk)
        )
        if not selectors.may_decide(actor, request):
            raise PermissionDenied(f"You may not decide this request for {request.group}.")
        if request.state != ChangeRequest.State.PENDING:
            raise ValidationError(
                {"decision": f"This request is {request.get_state_display().lower()} already."}
            )
        comment = (comment or "").strip()
        if decision == Decision.DENY:
            if not comment:
                raise ValidationError({"comment": "Say why the request is denied."})
            request.state = ChangeRequest.State.DENIED
        elif decision == Decision.APPROVE:
            request.state = ChangeRequest.State.APPROVED
        elif decision == Decision.APPROVE_WITH_CHANGES:
            if request.kind != ChangeRequest.Kind.QUOTA:
                what = "A loan" if request.kind == ChangeRequest.Kind.LOAN else "A new compute resource"
                raise ValidationError({"decision": f"{what} is approved as asked or denied, not changed."})
            if not values:
                raise ValidationError({"values": "Give the values you approve."})
            request.state = ChangeRequest.State.APPROVED_WITH_CHANGES
        else:
            raise ValidationError({"decision": f"Choose one of {', '.join(c for c, _ in Decision.CHOICES)}."})
        if request.state != ChangeRequest.State.DENIED:
            if request.kind == ChangeRequest.Kind.LOAN:
                loan = _apply_loan(request, actor=actor)
                request.applied_loan = loan
                request.applied_values = _json(request.asked_values) | {"until": loan.ends_at.isoformat()}
            elif request.kind == ChangeRequest.Kind.QUOTA:
                wanted = values if decision == Decision.APPROVE_WITH_CHANGES else request.asked_values
                applied, change = _apply_quota(request, wanted, actor=actor, version=version, via=via)
                request.applied_values = _json(applied)
            else:
                resource, change = _apply_compute_resource(request, actor=actor, via=via)
                request.compute_resource = resource
                request.applied_values = {"profile": request.profile.name, "name": resource.name}
            if request.kind != ChangeRequest.Kind.LOAN:
                request.applied_change = change
        request.approver = actor
        request.decision_comment = comment
        request.decided_at = timezone.now()
        request.save()
        title = f"Your request for {request.group} was {request.get_state_display().lower()}"
        text = (
            f"{title} by {actor}"
            + (f": {_values_text(request.applied_values)}" if request.applied_values else "")
            + (f". {comment}" if comment else ".")
        )
        _notify([request.requester], text)
        _webhook(request, title, text)
    return request


def _webhook(request: ChangeRequest, title: str, text: str) -> None:
    """Tell the group's webhooks: a group notice (apps.core.events), delivered after commit."""
    events.notify(request.group, "change_request", title, text, LINK)


def withdraw(request: ChangeRequest, *, actor: User) -> ChangeRequest:
    """The requester takes back a pending request."""
    with transaction.atomic():
        request = ChangeRequest.objects.select_for_update(no_key=True).get(pk=request.pk)
        if actor.pk != request.requester_id:
            raise PermissionDenied("Only the requester withdraws a request.")
        if request.state != ChangeRequest.State.PENDING:
            raise ValidationError(
                {"state": f"This request is {request.get_state_display().lower()} already."}
            )
        request.state = ChangeRequest.State.WITHDRAWN
        request.decided_at = timezone.now()
        request.save(update_fields=["state", "decided_at"])
    return request
