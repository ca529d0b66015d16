"""Provisioned people: SCIM User resources read from and written to Klique's users.

A User resource is its stored document with Klique's columns on top: ``userName`` is the
username, ``active`` the account's state, ``groups`` the provider's groups holding the person.
Writes project ``userName``, the primary (else first) e-mail and ``name.givenName`` /
``name.familyName`` onto the user; ``active`` goes through ``lockout``."""

from typing import Any

from django.contrib.auth.hashers import make_password
from django.db import IntegrityError, transaction
from scim2_models import Context

from apps.accounts.models import User
from apps.scim import lockout, memberships
from apps.scim.models import IdentityProvider, ScimGroup, ScimUser
from apps.scim.protocol import POLICY, ScimError, UserResource, apply_patch, read_resource

USERNAME_MAX = User._meta.get_field("username").max_length
NOT_STORED = ("id", "meta", "groups", "password", "userName")


def meta(kind: str, obj, base: str) -> dict[str, Any]:
    return {
        "resourceType": kind,
        "created": obj.created_at.isoformat(),
        "lastModified": obj.updated_at.isoformat(),
        "location": f"{base}{kind}s/{obj.scim_id}",
        "version": f'W/"{obj.version}"',
    }


def as_resource(link: ScimUser, base: str) -> UserResource:
    user = link.user
    doc = dict(link.document)
    doc.update(id=str(link.scim_id), userName=user.username, meta=meta("User", link, base))
    if "active" in doc or not user.is_active:
        # unassigned (never sent, or removed) reads as active, as RFC 7643 gives it no default
        doc["active"] = user.is_active
    groups = ScimGroup.objects.filter(provider_id=link.provider_id, members=user)
    doc["groups"] = [
        {
            "value": str(g.scim_id),
            "display": g.display_name,
            "$ref": f"{base}Groups/{g.scim_id}",
            "type": "direct",
        }
        for g in groups
    ] or None
    with POLICY:
        return UserResource.model_validate(doc)


def read(payload: Any, context: Context) -> UserResource:
    return read_resource(UserResource, payload, context)


def _checked_name(resource: UserResource) -> str:
    name = (resource.user_name or "").strip()
    if not name:
        raise ScimError(400, "userName is required.", "invalidValue")
    if len(name) > USERNAME_MAX:
        raise ScimError(400, f"userName is longer than {USERNAME_MAX} characters.", "invalidValue")
    return name


def _user_name(resource: UserResource, user: User) -> str:
    name = _checked_name(resource)
    if User.objects.filter(username__iexact=name).exclude(pk=user.pk).exists():
        raise ScimError(409, f"userName {name!r} is already taken.", "uniqueness")
    return name


def _email(resource: UserResource) -> str:
    emails = [e for e in resource.emails or [] if e.value]
    chosen = next((e for e in emails if e.primary), emails[0] if emails else None)
    return str(chosen.value)[:254] if chosen else ""


def _store(link: ScimUser, resource: UserResource, *, provider: IdentityProvider, created: bool) -> None:
    """Write the resource onto the link's user and document; then its ``active`` state."""
    user = link.user
    user.username = _user_name(resource, user)
    user.email = _email(resource)
    user.first_name = ((resource.name and resource.name.given_name) or "")[:150]
    user.last_name = ((resource.name and resource.name.family_name) or "")[:150]
    user.save(update_fields=["username", "email", "first_name", "last_name"])
    with POLICY:
        document = resource.model_dump(scim_ctx=Context.RESOURCE_CREATION_RESPONSE)
    link.document = {k: v for k, v in document.items() if k not in NOT_STORED and k != "active"}
    if resource.active is not None:
        link.document["active"] = bool(resource.active)
    link.external_id = (resource.external_id or "")[:255]
    if not created:
        link.version += 1
    link.save()
    active = True if resource.active is None else bool(resource.active)
    lockout.set_active(user, active, provider=provider)


@transaction.atomic
def create(provider: IdentityProvider, resource: UserResource) -> ScimUser:
    """A new person, or an existing Klique account no provider holds yet (matched on username,
    case ignored); an account another provider holds, or this one already, is a conflict."""
    name = _checked_name(resource)
    user = User.objects.select_for_update(no_key=True).filter(username__iexact=name).first()
    if user is not None and ScimUser.objects.filter(user=user).exists():
        raise ScimError(409, f"userName {name!r} is already provisioned.", "uniqueness")
    if user is None:
        user = User(username=name, password=make_password(None), is_active=True)
        try:
            with transaction.atomic():
                user.save()
        except IntegrityError as exc:
            raise ScimError(409, f"userName {name!r} is already taken.", "uniqueness") from exc
    link = ScimUser(provider=provider, user=user)
    _store(link, resource, provider=provider, created=True)
    return link


@transaction.atomic
def replace(link: ScimUser, resource: UserResource) -> ScimUser:
    _store(link, resource, provider=link.provider, created=False)
    return link


@transaction.atomic
def patch(link: ScimUser, payload: Any, base: str) -> ScimUser:
    resource = apply_patch(UserResource, as_resource(link, base), payload)
    _store(link, resource, provider=link.provider, created=False)
    return link


@transaction.atomic
def delete(link: ScimUser) -> None:
    """The person is deactivated and locked out, leaves the provider's groups (their memberships
    resynced) and is no longer provisioned; the account stays, as their usage is recorded
    against it."""
    user = link.user
    for group in ScimGroup.objects.filter(provider_id=link.provider_id, members=user):
        group.members.remove(user)
    lockout.set_active(user, False, provider=link.provider)
    link.delete()
    memberships.resync([user])
