"""Create an enrolment token for a pool from the shell; prints the token (shown once)."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apps.pools import services
from apps.pools.models import EnrolmentToken, Pool


class Command(BaseCommand):
    help = "Create an enrolment token for a pool's worker daemons and print it (it is not stored)."

    def add_arguments(self, parser):
        parser.add_argument("pool", help="the pool's name")
        parser.add_argument("--name", default="created from the shell", help="what the token is for")

    def handle(self, *args, pool: str, name: str, **options):
        found = Pool.objects.filter(name=pool).first()
        if found is None:
            raise CommandError(f"pool: no pool named {pool!r}")
        try:
            raw = services.issue_enrolment_token(EnrolmentToken(pool=found, name=name), now=timezone.now())
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from error
        self.stdout.write(raw)
