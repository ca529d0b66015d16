"""``manage.py engine``: the engine switch from the shell (the admin's "Disable"/"Enable" actions).

Used around an upgrade (docs/operations.md): ``--disable`` before ``migrate``, ``--enable`` after.
``--disable`` returns once no pass is in flight anywhere: it takes the pass lock once, so a pass
that began before the switch has finished. Disabled time is not charged to time budgets.
"""

import time

from django.core.management.base import BaseCommand, CommandError

from apps.engine import services
from apps.engine.lock import exclusive_pass


class Command(BaseCommand):
    help = "Show, disable or enable the compute policy engine (the engine switch)."

    def add_arguments(self, parser):
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--disable", action="store_true", help="stop the engine's passes")
        which.add_argument("--enable", action="store_true", help="run the engine's passes again")
        parser.add_argument(
            "--wait",
            type=float,
            default=60,
            help="with --disable: seconds to wait at most for a pass in flight to end (default 60)",
        )

    def handle(self, *args, disable: bool, enable: bool, wait: float, **options):
        if disable or enable:
            services.set_engine_enabled(enable)
        if disable:
            deadline = time.monotonic() + wait
            while True:
                with exclusive_pass() as acquired:
                    if acquired:
                        break
                if time.monotonic() >= deadline:
                    raise CommandError(f"engine disabled, but a pass was still running after {wait:g} s")
                time.sleep(0.2)
        state = services.switch()
        since = f" since {state.changed_at:%Y-%m-%d %H:%M:%S} UTC" if state.changed_at else ""
        self.stdout.write(f"engine {'enabled' if state.enabled else 'disabled'}{since}")
