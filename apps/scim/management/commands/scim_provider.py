"""manage.py scim_provider NAME [--rotate]: an identity provider for SCIM, and its token, printed
once (docs/governance.md, "SCIM provisioning")."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.scim import services
from apps.scim.models import IdentityProvider


class Command(BaseCommand):
    help = "Create an identity provider that provisions over SCIM (or --rotate its token); prints it once."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--rotate", action="store_true", help="Give an existing provider a new token.")

    def handle(self, *args, name: str, rotate: bool, **options):
        if rotate:
            provider = IdentityProvider.objects.filter(name=name).first()
            if provider is None:
                raise CommandError(f"No identity provider named {name!r}.")
            raw = services.rotate_token(provider)
        else:
            try:
                provider, raw = services.create_provider(name=name)
            except ValidationError as error:
                raise CommandError("; ".join(error.messages)) from error
        self.stdout.write(raw)
        self.stderr.write(f"The SCIM token of {provider.name}: shown once, keep it in the identity provider.")
