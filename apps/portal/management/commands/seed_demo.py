from django.core.management.base import BaseCommand

from apps.portal import demo


class Command(BaseCommand):
    help = "Load the demo estate (groups, pools, profiles, policies, one user per role). Idempotent."

    def handle(self, *args, **options):
        created = demo.seed()
        summary = ", ".join(f"{count} {what}" for what, count in created.items())
        self.stdout.write(f"Demo estate ready (created now: {summary}).")
        self.stdout.write(f"Demo users (password: {demo.demo_password()}):")
        for user in demo.DEMO_USERS:
            self.stdout.write(f"  {user.username:<18} {user.role:<16} {user.group}")
