"""``manage.py export_scenario --start ISO --end ISO [--groups SLUG ...] [--output FILE] [--fidelity]``:
a recorded period as a simulator scenario (docs/whatif.md)."""

import json
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from apps.engine import export, export_fidelity


def _instant(option: str, text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"{option}: {text!r} is not an ISO 8601 time, e.g. 2026-03-02T00:00:00Z", returncode=2
        ) from None
    if when.tzinfo is None:
        raise CommandError(f"{option}: {text!r} needs a UTC offset, e.g. 2026-03-02T00:00:00Z", returncode=2)
    return when


class Command(BaseCommand):
    help = "Write the recorded period [start, end) as a simulator scenario (see docs/whatif.md)."

    def add_arguments(self, parser):
        parser.add_argument("--start", required=True, help="Start of the period, ISO 8601 with a UTC offset.")
        parser.add_argument("--end", required=True, help="End of the period (excluded), ISO 8601.")
        parser.add_argument(
            "--groups", nargs="+", metavar="SLUG", help="Only these groups and their subtrees (default: all)."
        )
        parser.add_argument("--output", help="Write the scenario to this file (default: standard output).")
        parser.add_argument(
            "--fidelity",
            action="store_true",
            help="Also replay the export in the simulator and print how closely it matches the record "
            "(one JSON line on standard error).",
        )

    def handle(self, *args, start, end, groups=None, output=None, fidelity=False, **options):
        try:
            data = export.export(_instant("--start", start), _instant("--end", end), groups)
        except export.ExportError as e:
            raise CommandError(str(e), returncode=2) from None
        text = export.dumps(data)
        if output:
            try:
                with open(output, "w") as f:
                    f.write(text)
            except OSError as e:
                raise CommandError(f"--output: cannot write {output!r}: {e.strerror}", returncode=2) from None
        else:
            self.stdout.write(text, ending="")
        if fidelity:
            self.stderr.write(json.dumps(export_fidelity.fidelity(data)))
