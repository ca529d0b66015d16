"""``manage.py simulate SCENARIO.json``: the engine core on a virtual clock, no database needed."""

import sys

from django.core.management.base import BaseCommand

from apps.engine.core.simulator import main


class Command(BaseCommand):
    help = "Replay a scenario through the engine core on a virtual clock (see docs/engine.md)."

    def run_from_argv(self, argv):
        sys.exit(main(argv[2:]))
