"""Provisioned groups: SCIM Group resources, their members (people the same provider
provisioned, by their SCIM id) and the Klique memberships their names grant
(``apps.scim.memberships``): any change of name or members resyncs the people it touches."""

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from scim2_models import Context

from apps.accounts.models import User
from apps.scim import memberships
from apps.scim.models import IdentityProvider, ScimGroup, ScimUser
from apps.scim.protocol import POLICY, GroupResource, ScimError, apply_patch, read_resource
from apps.scim.users import meta

NAME_MAX = ScimGroup._meta.get_field("display_name").max_length
NOT_STORED = ("id", "meta", "displayName")


def as_resource(group: ScimGroup, base: str) -> GroupResource:
    doc = dict(group.document)
    doc.update(id=str(group.scim_id), displayName=group.display_name, meta=meta("Group", group, base))
    shown = {m.get("value"): m.get("display") for m in doc.get("members") or [] if isinstance(m, dict)}
    links = ScimUser.objects.filter(provider_id=group.provider_id, user__in=group.members.all())
    doc["members"] = [
        {"value": str(link.scim_id), "$ref": f"{base}Users/{link.scim_id}", "type": "User"}
        | ({"display": shown[str(link.scim_id)]} if shown.get(str(link.scim_id)) else {})
        for link in links.order_by("pk")
    ] or None
    with POLICY:
        return GroupResource.model_validate(doc)


def read(payload: Any, context: Context) -> GroupResource:
    return read_resource(GroupResource, payload, context)


def _members(provider: IdentityProvider, resource: GroupResource) -> list[User]:
    """The people the members name; a member that is no person this provider provisioned is
    refused (nested groups are not supported)."""
    wanted, unknown = [], []
    for member in resource.members or []:
        if member.type and str(member.type).lower() != "user":
            raise ScimError(
                400, f"members: {member.value} is a {member.type}; only users can be members.", "invalidValue"
            )
        wanted.append(str(member.value or ""))
    links = {}
    for value in wanted:
        link = (
            ScimUser.objects.filter(provider=provider, scim_id=value).select_related("user").first()
            if _is_uuid(value)
            else None
        )
        if link is None:
            unknown.append(value)
        else:
            links[link.pk] = link.user
    if unknown:
        raise ScimError(
            400, f"members: no user of this provider has the id {', '.join(unknown)}.", "invalidValue"
        )
    return list(links.values())


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _store(group: ScimGroup, resource: GroupResource, *, created: bool) -> None:
    name = (resource.display_name or "").strip()
    if not name:
        raise ScimError(400, "displayName is required.", "invalidValue")
    if len(name) > NAME_MAX:
        raise ScimError(400, f"displayName is longer than {NAME_MAX} characters.", "invalidValue")
    clash = ScimGroup.objects.filter(provider=group.provider, display_name=name).exclude(pk=group.pk)
    if clash.exists():
        raise ScimError(409, f"displayName {name!r} is already a group of this provider.", "uniqueness")
    people = _members(group.provider, resource)
    renamed = group.display_name != name
    before = set() if created else set(group.members.all())
    group.display_name = name
    group.external_id = (resource.external_id or "")[:255]
    with POLICY:
        document = resource.model_dump(scim_ctx=Context.RESOURCE_CREATION_RESPONSE)
    group.document = {k: v for k, v in document.items() if k not in NOT_STORED}
    group.document["members"] = [
        {"value": str(m.value), "display": m.display} for m in resource.members or [] if m.display
    ]
    if not created:
        group.version += 1
    try:
        with transaction.atomic():
            group.save()
    except IntegrityError as exc:
        raise ScimError(
            409, f"displayName {name!r} is already a group of this provider.", "uniqueness"
        ) from exc
    group.members.set(people)
    after = set(people)
    memberships.resync((before | after) if renamed else (before ^ after))


@transaction.atomic
def create(provider: IdentityProvider, resource: GroupResource) -> ScimGroup:
    group = ScimGroup(provider=provider)
    _store(group, resource, created=True)
    return group


@transaction.atomic
def replace(group: ScimGroup, resource: GroupResource) -> ScimGroup:
    _store(group, resource, created=False)
    return group


@transaction.atomic
def patch(group: ScimGroup, payload: Any, base: str) -> ScimGroup:
    resource = apply_patch(GroupResource, as_resource(group, base), payload)
    _store(group, resource, created=False)
    return group


@transaction.atomic
def delete(group: ScimGroup) -> None:
    people = list(group.members.all())
    group.delete()
    memberships.resync(people)
