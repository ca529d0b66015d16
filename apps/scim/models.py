"""SCIM 2.0 provisioning (docs/governance.md, "SCIM provisioning"): the identity providers that
provision people and groups, each with its own bearer token, and what each has provisioned.

A resource's ``id`` is Klique's (``scim_id``); its ``externalId`` is the provider's. ``document``
keeps the SCIM attributes Klique has no column for (phone numbers, the enterprise extension, ...)
so that what a provider wrote it reads back; the columns of the user win over it."""

import uuid

from django.conf import settings
from django.db import models


class IdentityProvider(models.Model):
    """An identity provider (Entra ID, Okta, Keycloak, ...) allowed to provision over SCIM.

    Only a SHA-256 of its token is stored; the token is shown once, when it is made
    (``manage.py scim_provider`` or the admin's action)."""

    name = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=16, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    active = models.BooleanField(default=True, help_text="Inactive: its token is refused.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        verbose_name = "SCIM identity provider"

    def __str__(self) -> str:
        return self.name


class ScimUser(models.Model):
    """A person an identity provider provisioned; a person is provisioned by one provider at most."""

    provider = models.ForeignKey(IdentityProvider, on_delete=models.CASCADE, related_name="users")
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scim")
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    external_id = models.CharField(max_length=255, blank=True, db_index=True)
    document = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveIntegerField(default=1, editable=False)

    class Meta:
        ordering = ["created_at", "pk"]
        verbose_name = "SCIM user"

    def __str__(self) -> str:
        return f"{self.user} from {self.provider}"


class ScimGroup(models.Model):
    """A group an identity provider provisioned. A display name ``<OIDC_ROLE_PREFIX><group
    slug>[:<role>]`` grants its members that Klique membership (source: identity provider); any
    other name grants nothing."""

    provider = models.ForeignKey(IdentityProvider, on_delete=models.CASCADE, related_name="groups")
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    display_name = models.CharField(max_length=255)
    external_id = models.CharField(max_length=255, blank=True, db_index=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="scim_groups")
    document = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveIntegerField(default=1, editable=False)

    class Meta:
        ordering = ["display_name", "pk"]
        verbose_name = "SCIM group"
        constraints = [
            models.UniqueConstraint(fields=["provider", "display_name"], name="scim_group_name_per_provider")
        ]

    def __str__(self) -> str:
        return f"{self.display_name} from {self.provider}"
