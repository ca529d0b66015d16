"""SSO roles over SAML 2.0 with a real identity provider: Keycloak's `klique-saml` client
(deploy/dev-services/keycloak). Each login is SP-initiated: Klique redirects to Keycloak with an
AuthnRequest (redirect binding), the person fills Keycloak's real login page, and Keycloak's page
POSTs its signed SAMLResponse to allauth's assertion consumer service. Klique's SAML settings are
the ones klique/settings/base.py builds from the environment (``saml_apps``): the IdP's signing
certificate comes from Keycloak's metadata, and assertions must be signed."""

import base64
import logging
import os
import subprocess
import sys
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from lxml import etree

from apps.accounts.models import Membership, User
from klique.settings.base import BASE_DIR
from klique.settings.sso import saml_apps
from tests import keycloak

pytestmark = pytest.mark.django_db

IDP = Membership.Source.IDP
ACS = "/accounts/saml/sso/acs/"
SAML_LOG = "allauth.socialaccount.providers.saml.views"


@pytest.fixture
def saml(settings, keycloak_admin):
    settings.SOCIALACCOUNT_PROVIDERS = {"saml": keycloak.saml_provider()}
    settings.SAML_GROUPS_ATTRIBUTE = "groups"
    settings.SAML_ROLES_ATTRIBUTE = ""
    settings.OIDC_ROLE_PREFIX = "klique:"
    return keycloak_admin


@pytest.fixture
def groups():
    keycloak.create_klique_groups()


@pytest.fixture
def client():
    return Client(HTTP_HOST=keycloak.HOST)


def saml_response(client: Client, person: keycloak.Person) -> dict[str, str]:
    """Klique's login redirects to Keycloak with an AuthnRequest; the person logs in on Keycloak's
    page; the fields (SAMLResponse, RelayState) of the form Keycloak's answer auto-submits to ACS."""
    client.logout()
    start = client.post("/accounts/saml/sso/login/")
    assert start.status_code == 302, start.content.decode()[:500]
    assert start["Location"].startswith(f"{keycloak.REALM}/protocol/saml?SAMLRequest="), start["Location"]
    answer = keycloak.log_in_at_keycloak(start["Location"], person.username, person.password)
    assert answer.status_code == 200, answer.text[:500]
    action, fields = keycloak.auto_post_form(answer.text)
    assert (urlsplit(action).netloc, urlsplit(action).path) == (keycloak.HOST, ACS)
    assert "SAMLResponse" in fields
    return fields


def post_to_acs(client: Client, fields: dict[str, str]):
    """What Keycloak's auto-submitting form does: POST to the ACS, which hands over to its finish."""
    posted = client.post(ACS, fields)
    assert posted.status_code == 302, posted.content.decode()[:500]
    return client.get(posted["Location"])


def saml_login(client: Client, person: keycloak.Person) -> User:
    done = post_to_acs(client, saml_response(client, person))
    assert done.status_code == 302 and done["Location"] == "/", done.content.decode()[:800]
    return User.objects.get(pk=client.session["_auth_user_id"])


def held(user: User) -> set[tuple[str, str, str]]:
    return {(m.group.slug, m.role, m.source) for m in user.memberships.select_related("group")}


def test_a_saml_login_through_keycloak_logs_in_and_syncs_the_groups_attribute(client, saml, groups):
    person = saml.create_person(
        groups=["klique:perception", "klique:vision:department_head", "payroll-admins"]
    )
    user = saml_login(client, person)
    assert (user.username, user.email) == (person.username, person.email)
    assert held(user) == {("perception", "member", IDP), ("vision", "department_head", IDP)}
    assert client.get("/work/").status_code == 200

    saml.set_groups(person, ["klique:perception:team_lead"])
    assert saml_login(client, person).pk == user.pk
    assert held(user) == {("perception", "team_lead", IDP)}


def test_a_tampered_assertion_is_refused(client, saml, groups, caplog):
    """One group in the signed assertion changed to another: the signature no longer holds."""
    person = saml.create_person(groups=["klique:perception"])
    fields = saml_response(client, person)
    xml = base64.b64decode(fields["SAMLResponse"])
    assert xml.count(b">klique:perception<") == 1
    fields["SAMLResponse"] = base64.b64encode(
        xml.replace(b">klique:perception<", b">klique:acme:it_admin<")
    ).decode()
    with caplog.at_level(logging.ERROR, logger=SAML_LOG):
        refused = post_to_acs(client, fields)
    assert refused.status_code == 401 and "_auth_user_id" not in client.session
    assert "Signature validation failed. SAML Response rejected" in caplog.text, caplog.text
    assert not User.objects.filter(username=person.username).exists()
    assert not Membership.objects.filter(source=IDP).exists()


def test_an_expired_assertion_is_refused(client, saml, groups, caplog):
    """Keycloak's assertion is valid for minutes (its Conditions' NotOnOrAfter); presented an hour
    later, with the clock moved on, it is refused."""
    person = saml.create_person(groups=["klique:perception"])
    fields = saml_response(client, person)
    with (
        time_machine.travel(timezone.now() + timedelta(hours=1)),
        caplog.at_level(logging.ERROR, logger=SAML_LOG),
    ):
        refused = post_to_acs(client, fields)
    assert refused.status_code == 401 and "_auth_user_id" not in client.session
    assert "Could not validate timestamp: expired" in caplog.text, caplog.text
    assert not User.objects.filter(username=person.username).exists()


def test_a_response_replayed_after_its_login_is_refused(client, saml, groups):
    """A response answers one AuthnRequest of this browser; that request's state is used up."""
    person = saml.create_person(groups=["klique:perception"])
    fields = saml_response(client, person)
    done = post_to_acs(client, fields)
    assert done.status_code == 302 and done["Location"] == "/"
    client.logout()
    replayed = post_to_acs(client, fields)
    assert replayed.status_code == 403 and "_auth_user_id" not in client.session
    elsewhere = post_to_acs(Client(HTTP_HOST=keycloak.HOST), fields)
    assert elsewhere.status_code == 403


def test_an_assertion_stripped_of_its_signatures_is_refused(client, saml, groups, caplog):
    """Klique requires signed assertions: the same response with every signature removed fails."""
    person = saml.create_person(groups=["klique:perception"])
    fields = saml_response(client, person)
    xml = etree.fromstring(base64.b64decode(fields["SAMLResponse"]))
    signatures = xml.findall(".//{http://www.w3.org/2000/09/xmldsig#}Signature")
    assert len(signatures) == 2  # the response's and the assertion's
    for signature in signatures:
        signature.getparent().remove(signature)
    fields["SAMLResponse"] = base64.b64encode(etree.tostring(xml)).decode()
    with caplog.at_level(logging.ERROR, logger=SAML_LOG):
        refused = post_to_acs(client, fields)
    assert refused.status_code == 401 and "_auth_user_id" not in client.session
    assert "The Assertion of the Response is not signed and the SP require it" in caplog.text, caplog.text


def test_saml_is_configured_from_the_environment_and_only_when_set():
    assert saml_apps({}) == []
    assert saml_apps({"SAML_IDP_METADATA_URL": keycloak.SAML_METADATA_URL}) == []
    (app,) = saml_apps({"SAML_IDP_METADATA_URL": "https://idp.example/metadata", "SAML_ENTITY_ID": "klique"})
    assert app["client_id"] == "sso" and app["settings"]["sp"] == {"entity_id": "klique"}
    assert app["settings"]["advanced"]["want_assertion_signed"] is True
    assert app["settings"]["advanced"]["reject_idp_initiated_sso"] is True


def test_the_login_forms_may_lead_to_the_configured_identity_providers_only():
    """The Content-Security-Policy's form-action: the portal, the OIDC issuer, the SAML IdP's host."""
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'klique.settings.base'; django.setup(); "
        "from django.conf import settings; "
        "print(' '.join(settings.CONTENT_SECURITY_POLICY['DIRECTIVES']['form-action']))"
    )
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("OIDC_", "SAML_"))}
    saml = {"SAML_IDP_METADATA_URL": "https://idp.example/app/1/metadata", "SAML_ENTITY_ID": "klique"}
    oidc = {"OIDC_PROVIDER_URL": "https://id.example/realms/acme", "OIDC_CLIENT_ID": "klique"}
    for env, expected in [
        ({}, "'self'"),
        (saml, "'self' https://idp.example"),
        (saml | oidc, "'self' https://id.example/realms/acme https://idp.example"),
    ]:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=BASE_DIR, env=bare | env, capture_output=True, text=True
        )
        assert done.stdout.strip() == expected, done.stderr
