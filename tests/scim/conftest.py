"""Fixtures of the SCIM tests: an identity provider with its token, and a client speaking SCIM."""

import json

import pytest
from django.test import Client

from apps.scim import services


class ScimClient:
    """Django's test client with a provider's bearer token and SCIM's content type."""

    def __init__(self, token: str):
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def _send(self, method: str, path: str, payload=None, **params):
        kwargs = {"content_type": "application/scim+json"}
        if payload is not None:
            kwargs["data"] = json.dumps(payload)
        response = (
            getattr(self.client, method)(f"/scim/v2/{path}", **kwargs)
            if method != "get"
            else (self.client.get(f"/scim/v2/{path}", params))
        )
        response.json_body = json.loads(response.content) if response.content else None
        return response

    def get(self, path, **params):
        return self._send("get", path, **params)

    def post(self, path, payload):
        return self._send("post", path, payload)

    def put(self, path, payload):
        return self._send("put", path, payload)

    def patch(self, path, payload):
        return self._send("patch", path, payload)

    def delete(self, path):
        return self._send("delete", path)


@pytest.fixture
def provider_and_token(db):
    return services.create_provider(name="Entra ID")


@pytest.fixture
def scim(provider_and_token):
    return ScimClient(provider_and_token[1])


@pytest.fixture
def other_scim(db):
    return ScimClient(services.create_provider(name="Okta")[1])


USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ENTERPRISE = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"


def entra_user(name: str = "alice@contoso.com", external_id: str = "0a21f0f2-8d2a") -> dict:
    """The shape Entra ID's provisioning service POSTs (learn.microsoft.com, "Develop a SCIM endpoint")."""
    return {
        "schemas": [USER, ENTERPRISE],
        "externalId": external_id,
        "userName": name,
        "active": True,
        "emails": [{"primary": True, "type": "work", "value": name}],
        "meta": {"resourceType": "User"},
        "name": {"formatted": "Alice Liddell", "familyName": "Liddell", "givenName": "Alice"},
        "roles": [],
        ENTERPRISE: {"department": "Research"},
    }
