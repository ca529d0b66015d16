"""``manage.py rollup_usage``: bring the rollups up to date, or recompute a range of them."""

from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from apps.ledger import rollups


def utc(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as error:
        raise CommandError(
            f"{value!r} is not an ISO date or time, e.g. 2026-03-01 or 2026-03-01T12:00"
        ) from error
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class Command(BaseCommand):
    help = (
        "Without options, bring the hourly and daily rollups up to the last closed hour (what the "
        "Celery task klique.ledger.rollup does). With --start and --end, recompute the closed hours of "
        "that UTC range from the usage intervals, whatever the rollups hold now."
    )

    def add_arguments(self, parser):
        parser.add_argument("--start", type=utc, help="UTC date or time; rounded down to the hour.")
        parser.add_argument("--end", type=utc, help="UTC date or time, not included; rounded up to the hour.")

    def handle(self, *args, start=None, end=None, **options):
        if (start is None) != (end is None):
            raise CommandError("Give both --start and --end, or neither.")
        if start is None:
            written = rollups.refresh()
            self.stdout.write(
                f"Rollups built until {rollups.built_until():%Y-%m-%d %H:%M} UTC; {written} rows written."
            )
            return
        if end <= start:
            raise CommandError("--end must come after --start.")
        written = rollups.rebuild(start, end)
        self.stdout.write(
            f"Recomputed {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC; {written} rows written."
        )
