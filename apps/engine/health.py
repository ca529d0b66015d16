"""The engine's readiness check (apps.core.health): the age of its last pass (not skipped), and with
``/readyz?engine=1`` a failure past ``READY_MAX_PASS_AGE_S`` (0: never)."""

from django.conf import settings
from django.utils import timezone

from apps.core.health import Stale
from apps.engine.models import PassRecord


def last_pass(*, strict: bool) -> dict:
    limit = settings.READY_MAX_PASS_AGE_S if strict else 0
    last = (
        PassRecord.objects.filter(skipped=False)
        .order_by("-started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    if last is None:
        if limit:
            raise Stale("no engine pass recorded")
        return {"last_pass_age_s": None}
    age = (timezone.now() - last).total_seconds()
    if limit and age > limit:
        raise Stale(f"the last engine pass began {age:.0f} s ago (limit {limit:g} s)")
    return {"last_pass_age_s": round(age, 1)}
