"""``manage.py seed_demo``: the demo estate. Under production settings it refuses to run, since its
users (IT staff among them) would log in with the published demo password; ``--allow-production``
loads it with a generated password, printed once."""

import secrets

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.portal import demo


class Command(BaseCommand):
    help = "Load the demo estate (groups, pools, profiles, policies, one user per role). Idempotent."

    def add_arguments(self, parser):
        parser.add_argument(
            "--allow-production",
            action="store_true",
            help="Load it under production settings too, with a generated password printed once.",
        )

    def handle(self, *args, allow_production: bool = False, **options):
        production = settings.KLIQUE_ENV == "production"
        if production and not allow_production:
            raise CommandError(
                "seed_demo refuses to run under production settings: its users, IT staff among them, "
                "would log in with the published demo password. Pass --allow-production to load it "
                "with a generated password instead."
            )
        password = secrets.token_urlsafe(18) if production else demo.demo_password()
        created = demo.seed(password=password)
        summary = ", ".join(f"{count} {what}" for what, count in created.items())
        self.stdout.write(f"Demo estate ready (created now: {summary}).")
        if production:
            shown = password if created["users"] else "unchanged: no demo user was created now"
            self.stdout.write(f"Demo users (password, shown this once: {shown}):")
        else:
            self.stdout.write(f"Demo users (password: {password}):")
        for user in demo.DEMO_USERS:
            self.stdout.write(f"  {user.username:<18} {user.role:<16} {user.group}")
