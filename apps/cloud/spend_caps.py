"""Leadership's cloud spend caps: set, change and remove the monthly cap of the organisation or a
business unit. Every change leaves a ``CloudSpendCapChange`` in its transaction. (What a reached
cap stops is the autoscaler's and the engine's: ``apps.cloud.services``, ``apps.engine``.)"""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Group
from apps.cloud.models import CAP_KINDS, CloudSpendCap, CloudSpendCapChange
from apps.core.audit import record_change
from apps.core.currency import currency_error
from apps.core.numbers import NotPlain, plain_decimal
from apps.core.writes import validated_save

CAP_DIGITS, CAP_PLACES = 12, 4


def _cap_snapshot(cap: CloudSpendCap) -> dict[str, str]:
    return {"group": cap.group.name, "amount": f"{Decimal(cap.amount):.4f}", "currency": cap.currency}


def _audit_cap(cap: CloudSpendCap, action: str, before: dict, after: dict, actor, via: str) -> None:
    record_change(
        CloudSpendCapChange,
        actor=actor,
        via=via,
        cap=None if action == CloudSpendCapChange.Action.REMOVED else cap,
        group_id=cap.group_id,
        action=action,
        before=before,
        after=after,
    )


def cap_errors(group, amount, currency) -> dict[str, str]:
    """Field -> reason for a cap's group, monthly amount and currency."""
    errors = {}
    if not isinstance(group, Group):
        errors["group"] = "Choose the organisation or a business unit."
    elif group.kind not in CAP_KINDS:
        errors["group"] = (
            f"{group} is a {group.get_kind_display().lower()}: "
            "a cloud spend cap is for the organisation or a business unit."
        )
    try:
        value = plain_decimal(amount)
    except NotPlain as error:
        errors["amount"] = str(error)
    else:
        if not value.is_finite() or value <= 0:
            errors["amount"] = "The monthly amount must be more than 0."
        elif value >= Decimal(10) ** (CAP_DIGITS - CAP_PLACES):
            errors["amount"] = f"Less than {Decimal(10) ** (CAP_DIGITS - CAP_PLACES):f}."
        elif value != value.quantize(Decimal(1).scaleb(-CAP_PLACES)):
            errors["amount"] = f"At most {CAP_PLACES} decimal places."
    problem = currency_error(currency)
    if problem:
        errors["currency"] = problem
    return errors


def _via_error(via) -> dict[str, str]:
    if via in CloudSpendCapChange.Via.values:
        return {}
    return {"via": f"not one of {', '.join(CloudSpendCapChange.Via.values)}"}


@transaction.atomic
def set_cap(group: Group, amount, currency: str, *, actor, via: str) -> CloudSpendCap:
    """Set the monthly cloud spend cap of the organisation or a business unit (a new one, or a new
    amount or currency for its cap). ``ValidationError`` names each refused field."""
    errors = cap_errors(group, amount, currency) | _via_error(via)
    if errors:
        raise ValidationError(errors)
    Group.objects.select_for_update(no_key=True).filter(pk=group.pk).first()  # one writer per group at a time
    cap = CloudSpendCap.objects.select_related("group").filter(group=group).first()
    before = _cap_snapshot(cap) if cap else {}
    cap = cap or CloudSpendCap(group=group)
    cap.amount, cap.currency = plain_decimal(amount), currency.upper()
    after = _cap_snapshot(cap)
    if after == before:
        return cap
    validated_save(cap, set_by=actor, updated_at=timezone.now())
    action = CloudSpendCapChange.Action.CHANGED if before else CloudSpendCapChange.Action.SET
    _audit_cap(cap, action, before, after, actor, via)
    return cap


@transaction.atomic
def remove_cap(cap: CloudSpendCap, *, actor, via: str) -> None:
    """Remove a cap: its scope's cloud spend is no longer capped."""
    if errors := _via_error(via):
        raise ValidationError(errors)
    if not CloudSpendCap.objects.select_for_update(no_key=True).filter(pk=cap.pk).exists():
        return  # removed meanwhile: audited by whoever removed it
    _audit_cap(cap, CloudSpendCapChange.Action.REMOVED, _cap_snapshot(cap), {}, actor, via)
    cap.delete()
