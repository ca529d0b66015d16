"""The periods of a time budget window (a policy's, a loan's, a change request's): UTC day, week
from Monday, month from the 1st. Its own module so that every model module can import it."""

from django.db import models


class Period(models.TextChoices):
    DAY = "day", "Day (from 00:00 UTC)"
    WEEK = "week", "Week (from Monday, UTC)"
    MONTH = "month", "Month (from the 1st, UTC)"
