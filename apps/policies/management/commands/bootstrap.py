"""``manage.py bootstrap``: the first IT admin and the estate from a YAML file, unattended and
idempotent (docs/deploy.md, "The first admin and the estate")."""

import sys
from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apps.policies.bootstrap import EstateError, Loader, ensure_admin, root_group


class Command(BaseCommand):
    help = (
        "Create the first IT admin and load GPU types, groups, pools, profiles and resource policies "
        "from a YAML file (deploy/estate.example.yaml), in one transaction; safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="estate", metavar="FILE", help="the estate's YAML file")
        parser.add_argument("--admin-username", help="the first IT admin's username")
        parser.add_argument("--admin-email", default="", help="the admin's email address")
        parser.add_argument(
            "--admin-password-file",
            metavar="FILE",
            help="a file holding the admin's password (- for standard input); used only to create",
        )
        parser.add_argument(
            "--admin-group",
            metavar="SLUG",
            help="the group the admin is IT admin of (default: the root group)",
        )
        parser.add_argument(
            "--superuser", action="store_true", help="make the admin a Django superuser as well"
        )

    def handle(self, *args, estate=None, admin_username=None, admin_password_file=None, **options):
        if not estate and not admin_username:
            raise CommandError("nothing to do: give --from FILE, --admin-username, or both")
        data = self.read_estate(estate) if estate else None
        password = self.read_password(admin_password_file) if admin_password_file else None
        try:
            with transaction.atomic():
                counts = Loader(estate or "").load(data) if estate else {}
                if admin_username:
                    group = root_group(options["admin_group"])
                    if group is None and not options["superuser"]:
                        raise EstateError(
                            "admin: no group to make them IT admin of; load one (--from) or give --superuser"
                        )
                    user, created = ensure_admin(
                        username=admin_username,
                        email=options["admin_email"],
                        password=password,
                        group=group,
                        superuser=options["superuser"],
                    )
        except EstateError as error:
            raise CommandError(f"{error} (nothing was written)") from error
        for what, count in counts.items():
            self.stdout.write(f"{what}: {count}")
        if admin_username:
            state = "created" if created else "exists, password unchanged"
            where = f", IT admin of {group.slug}" if group else ""
            self.stdout.write(
                f"admin {user.username}: {state}{where}{', superuser' if user.is_superuser else ''}"
            )

    def read_estate(self, path: str):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise CommandError(f"--from: cannot read {path}: {error.strerror}") from error
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise CommandError(f"{path}: not valid YAML: {error}") from error

    def read_password(self, path: str) -> str:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise CommandError(f"--admin-password-file: cannot read {path}: {error.strerror}") from error
        return text.rstrip("\r\n")
