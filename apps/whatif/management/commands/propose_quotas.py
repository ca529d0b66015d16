"""Propose quotas for a recorded period and wait for the proof (docs/whatif.md, "Quota advisor").

manage.py propose_quotas                                   last month
manage.py propose_quotas --start 2026-11-01 --end 2026-11-15
"""

import time
from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apps.whatif import advisor, services
from apps.whatif.models import WhatIfRun


def _day(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise CommandError(f"{text!r}: give a day as YYYY-MM-DD (00:00 UTC)") from None


class Command(BaseCommand):
    help = (
        "Propose reservations, limits and budgets per group for a recorded period, with its what-if replay."
    )

    def add_arguments(self, parser):
        parser.add_argument("--start", type=_day, help="First day (default: the first of last month).")
        parser.add_argument("--end", type=_day, help="Day after the last (default: the first of this month).")
        parser.add_argument(
            "--wait", type=int, default=3600, help="Seconds to wait for the replay (0: do not)."
        )

    def handle(self, *args, start=None, end=None, wait=3600, **options):
        default_start, default_end = advisor.last_month(timezone.now())
        start = _day(start) if isinstance(start, str) else start or default_start
        end = _day(end) if isinstance(end, str) else end or default_end
        try:
            proposal = advisor.propose(None, start, end)
        except services.RunError as error:
            raise CommandError(str(error)) from None
        changed = [row for row in proposal.groups if row["changed"]]
        self.stdout.write(f"Proposal {proposal.pk}: {len(changed)} of {len(proposal.groups)} groups change.")
        for row in changed:
            now, new = row["current"], row["proposed"]
            self.stdout.write(
                f"  {row['group']}: reservation {now['reservation']} -> {new['reservation']}, "
                f"limit {now['limit']} -> {new['limit']}, "
                f"budget hours {now['budget_hours']} -> {new['budget_hours']}"
            )
        deadline = time.monotonic() + wait
        run = proposal.run
        while wait and not run.finished and time.monotonic() < deadline:
            time.sleep(1)
            run.refresh_from_db()
        error = f": {run.error}" if run.state == WhatIfRun.State.FAILED else ""
        self.stdout.write(f"What-if run {run.pk}: {run.get_state_display().lower()}{error}")
