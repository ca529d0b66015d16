"""``manage.py seed_demo``: the demo estate. Under production settings it refuses to run, since its
users (IT staff among them) would log in with the published demo password; ``--allow-production``
loads it with a generated password, printed once. ``--size medium`` or ``large`` makes it the
estate at scale (``apps.portal.demo_large``: 200 or 2,000 groups, a year of usage). Last month's cloud
bill comes reconciled, with one injected difference (``apps.portal.demo_bill``)."""

import secrets
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apps.cloud.models import CloudPool
from apps.portal import demo, demo_bill, demo_large


class Command(BaseCommand):
    help = "Load the demo estate (groups, pools, profiles, policies, one user per role). Idempotent."

    def add_arguments(self, parser):
        parser.add_argument(
            "--allow-production",
            action="store_true",
            help="Load it under production settings too, with a generated password printed once.",
        )
        parser.add_argument(
            "--size",
            choices=["demo", *demo_large.SIZES],
            default="demo",
            help="demo: 15 groups; medium: 200 groups, 50 pools, 5,000 tasks, 1 million usage intervals; "
            "large: 2,000 groups, 500 pools, 50,000 tasks, 10 million usage intervals over a year.",
        )

    def handle(self, *args, allow_production: bool = False, size: str = "demo", **options):
        production = settings.KLIQUE_ENV == "production"
        if production and not allow_production:
            raise CommandError(
                "seed_demo refuses to run under production settings: its users, IT staff among them, "
                "would log in with the published demo password. Pass --allow-production to load it "
                "with a generated password instead."
            )
        password = secrets.token_urlsafe(18) if production else demo.demo_password()
        began = time.perf_counter()
        created = demo.seed(password=password)
        demo_bill.seed_bill(CloudPool.objects.get(pool__name=demo.CLOUD_POOL), timezone.now())
        summary = ", ".join(f"{count} {what}" for what, count in created.items())
        self.stdout.write(f"Demo estate ready (created now: {summary}).")
        if size != "demo":
            added = demo_large.seed(demo_large.SIZES[size], out=self.stdout.write)
            grown = ", ".join(f"{count:,} {what}" for what, count in added.items()) or "there already"
            took = time.perf_counter() - began
            self.stdout.write(f"Demo estate at the {size} size ready in {took:.0f} s ({grown}).")
        if production:
            shown = password if created["users"] else "unchanged: no demo user was created now"
            self.stdout.write(f"Demo users (password, shown this once: {shown}):")
        else:
            self.stdout.write(f"Demo users (password: {password}):")
        for user in demo.DEMO_USERS:
            self.stdout.write(f"  {user.username:<18} {user.role:<16} {user.group}")
