"""Portal login through a real identity provider, in headless Chromium: the person presses the
Keycloak button on Klique's login page, logs in on Keycloak's real login page
(deploy/dev-services/keycloak) and lands on the portal, logged in, with the memberships their
Keycloak groups grant: by OpenID Connect, and by SAML 2.0."""

import pytest

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from tests import keycloak

pytestmark = pytest.mark.browser


@pytest.fixture
def providers(settings, keycloak_admin, transactional_db):
    settings.SOCIALACCOUNT_PROVIDERS = {
        "openid_connect": keycloak.oidc_provider(),
        "saml": keycloak.saml_provider(SAML_PROVIDER_NAME="Keycloak (SAML)"),
    }
    # What SSO_ORIGINS gives with these providers set in the environment.
    directives = settings.CONTENT_SECURITY_POLICY["DIRECTIVES"] | {"form-action": ["'self'", keycloak.URL]}
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": directives}
    settings.OIDC_GROUPS_CLAIM, settings.OIDC_ROLES_CLAIM = "groups", "roles"
    settings.SAML_GROUPS_ATTRIBUTE, settings.SAML_ROLES_ATTRIBUTE = "groups", ""
    acme = accounts.create_group(name="Acme", slug="acme", kind=Group.Kind.ORGANISATION)
    vision = accounts.create_group(name="Vision", slug="vision", kind=Group.Kind.DEPARTMENT, parent=acme)
    accounts.create_group(name="Perception", slug="perception", kind=Group.Kind.TEAM, parent=vision)
    return keycloak_admin


@pytest.mark.parametrize("button", ["Log in with Keycloak", "Log in with Keycloak (SAML)"])
def test_a_person_logs_in_to_the_portal_on_keycloaks_login_page(session, providers, button):
    person = providers.create_person(groups=["klique:perception:team_lead"])
    browser = session()
    page = browser.open("/accounts/login/")
    page.get_by_role("button", name=button, exact=True).click()
    page.wait_for_url(f"{keycloak.REALM}/**")
    page.fill("#username", person.username)
    page.fill("#password", person.password)
    page.click("#kc-login")
    page.wait_for_url(browser.server + "/**")
    assert "/accounts/login/" not in page.url
    user = User.objects.get(username=person.username)
    assert {(m.group.slug, m.role, m.source) for m in user.memberships.select_related("group")} == {
        ("perception", "team_lead", Membership.Source.IDP)
    }
    assert browser.open("/work/").url == browser.server + "/work/"
    assert not browser.errors, browser.errors
