"""``{% maintenance_notice %}``: the maintenance windows in force or ahead, on the work and IT
pages, in the verdicts' own words (``apps.engine.verdict_words`` says the same of a task)."""

from datetime import timedelta

from django import template
from django.utils import timezone

from apps.pools.selectors import windows_not_over

register = template.Library()

AHEAD = timedelta(days=14)


@register.inclusion_tag("pools/_maintenance.html")
def maintenance_notice():
    now = timezone.now()
    windows = windows_not_over(now).filter(starts_at__lte=now + AHEAD)
    return {"windows": [(w, w.in_force(now)) for w in windows]}
