"""Klique memberships from SCIM groups: a group named ``<OIDC_ROLE_PREFIX><group slug>[:<role>]``
grants its members that membership, with the identity provider as its source, through the same
writer as the SSO login sync (apps.accounts.sso); groups of an inactive provider grant nothing."""

from collections.abc import Iterable

from django.db import transaction

from apps.accounts.models import User
from apps.accounts.sso import granted_by_values, sync_idp_grants
from apps.scim.models import ScimGroup


def names_of(user: User) -> list[str]:
    return list(
        ScimGroup.objects.filter(members=user, provider__active=True).values_list("display_name", flat=True)
    )


@transaction.atomic
def resync(users: Iterable[User]) -> None:
    """Make each user's identity-provider memberships those their SCIM groups grant."""
    for user in {u.pk: u for u in users}.values():
        sync_idp_grants(user, granted_by_values(names_of(user)))
