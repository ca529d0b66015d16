"""SSO roles: at each OpenID Connect or SAML 2.0 login, the memberships the identity provider grants
are synced from its claims or assertion attributes (docs/governance.md, "SSO roles").

A claim value ``<OIDC_ROLE_PREFIX><group slug>`` makes the person a member of that group;
``<OIDC_ROLE_PREFIX><group slug>:<role>`` gives them that role there. Values without the prefix
belong to other applications and are skipped; an unknown group or role is logged and skipped, never
created. Memberships granted in Klique are never touched."""

import logging
from collections.abc import Iterable, Mapping

from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.saml.provider import SAMLProvider
from django.conf import settings
from django.db import transaction

from apps.accounts.models import Group, Membership, User
from apps.accounts.services import sync_staff
from apps.core import memo

logger = logging.getLogger(__name__)


def claimed_values(claims: Mapping[str, object], names: Iterable[str] | None = None) -> list[str]:
    """The values of the groups and roles claims (each a list of strings or one string); ``names``
    are other claims' or SAML attributes' names instead of OIDC_GROUPS_CLAIM and OIDC_ROLES_CLAIM."""
    values: list[str] = []
    for name in (settings.OIDC_GROUPS_CLAIM, settings.OIDC_ROLES_CLAIM) if names is None else names:
        if not name:
            continue
        value = claims.get(name)
        if isinstance(value, str):
            values.append(value)
        elif isinstance(value, list | tuple):
            values.extend(v for v in value if isinstance(v, str))
    return values


def granted_by_claims(claims: Mapping[str, object]) -> set[tuple[int, str]]:
    """(group id, role) pairs that the claims grant; unknown groups and roles are logged, skipped."""
    return granted_by_values(claimed_values(claims))


def granted_by_values(values: Iterable[str]) -> set[tuple[int, str]]:
    """(group id, role) pairs that these values grant: a claim's values, or the display names of a
    person's SCIM groups (apps.scim); unknown groups and roles are logged, skipped."""
    prefix = settings.OIDC_ROLE_PREFIX
    wanted: dict[str, set[str]] = {}
    for value in values:
        if not value.startswith(prefix):
            continue
        slug, _, role = value[len(prefix) :].partition(":")
        role = role or Membership.Role.MEMBER.value
        if role not in Membership.Role.values:
            logger.warning("SSO roles: claim value %r names no Klique role; skipped", value)
            continue
        wanted.setdefault(slug, set()).add(role)
    groups = dict(Group.objects.filter(slug__in=wanted).values_list("slug", "pk"))
    for slug in sorted(set(wanted) - set(groups)):
        logger.warning("SSO roles: claim names group %r, which does not exist in Klique; skipped", slug)
    return {(groups[slug], role) for slug, roles in wanted.items() if slug in groups for role in roles}


@transaction.atomic
def sync_idp_memberships(user: User, claims: Mapping[str, object]) -> None:
    """Make the user's identity-provider memberships exactly those the claims grant: add the new,
    delete those no longer claimed (a changed role is one deleted and one added). A membership
    granted in Klique stays, even when the claims grant the same role too."""
    sync_idp_grants(user, granted_by_claims(claims))


@transaction.atomic
def sync_idp_grants(user: User, wanted: set[tuple[int, str]]) -> None:
    """Make the user's identity-provider memberships exactly ``wanted`` ((group id, role) pairs);
    the one writer of those memberships, for SSO logins and SCIM provisioning alike."""
    User.objects.select_for_update(no_key=True).filter(pk=user.pk).first()
    held = {(m.group_id, m.role): m for m in Membership.objects.filter(user=user)}
    gone = [m for key, m in held.items() if m.source == Membership.Source.IDP and key not in wanted]
    new = [
        Membership(user=user, group_id=group_id, role=role, source=Membership.Source.IDP)
        for group_id, role in sorted(wanted - set(held))
    ]
    Membership.objects.filter(pk__in=[m.pk for m in gone]).delete()
    Membership.objects.bulk_create(new, ignore_conflicts=True)
    memo.forget("memberships")  # bulk writes send no signal
    if gone or new:
        logger.info(
            "SSO roles for %s: added %s, removed %s",
            user.username,
            [(m.group_id, m.role) for m in new],
            [(m.group_id, m.role) for m in gone],
        )
        sync_staff(user)


def sync_enabled() -> bool:
    return bool(settings.OIDC_GROUPS_CLAIM or settings.OIDC_ROLES_CLAIM)


def saml_attributes() -> list[str]:
    """The SAML attributes whose values grant memberships, by the same rule as the OIDC claims."""
    return [name for name in (settings.SAML_GROUPS_ATTRIBUTE, settings.SAML_ROLES_ATTRIBUTE) if name]


def on_user_logged_in(sender, request, user, sociallogin=None, **kwargs) -> None:
    """allauth's ``user_logged_in``: sync after every OpenID Connect or SAML login, the first
    included. A SAML login's extra data is the assertion's attributes, each a list of values."""
    if sociallogin is None:
        return
    provider = sociallogin.account.get_provider(request)
    data = sociallogin.account.extra_data or {}
    if isinstance(provider, OpenIDConnectProvider) and sync_enabled():
        claims = {**(data.get("id_token") or {}), **(data.get("userinfo") or {})}
        sync_idp_memberships(user, claims)
    elif isinstance(provider, SAMLProvider) and (names := saml_attributes()):
        sync_idp_grants(user, granted_by_values(claimed_values(data, names)))
