"""A process of the engine on a SQLite file database, for the lock test.

``python -m tests.engine_live.sqlite_pass hold`` takes the pass lock, prints ``held True`` (or
``held False``) and keeps it until its stdin closes; ``... pass`` runs one pass and prints
``skipped <reason>`` or ``ran``. DATABASE_URL names the SQLite file.
"""

import os
import sys

import django


def main(what: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "klique.settings.base")
    django.setup()
    from apps.engine import services
    from apps.engine.lock import exclusive_pass

    if what == "hold":
        with exclusive_pass() as acquired:
            print(f"held {acquired}", flush=True)
            sys.stdin.read()
    else:
        record = services.run_pass()
        print(f"skipped {record.skip_reason}" if record.skipped else "ran", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
