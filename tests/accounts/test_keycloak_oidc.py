"""SSO roles over OpenID Connect with a real identity provider: Keycloak (deploy/dev-services/keycloak,
its `klique` realm). Each login is the real authorization-code flow with PKCE: Klique redirects to
Keycloak, the person fills Keycloak's real login page, Keycloak redirects to allauth's callback,
which exchanges the code for tokens; the memberships come from Keycloak's `groups` claim (group
names) and `roles` claim (the `klique` client's roles). Groups are changed between logins through
Keycloak's admin REST API."""

from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from tests import keycloak

pytestmark = pytest.mark.django_db

IDP = Membership.Source.IDP
CALLBACK = "/accounts/oidc/keycloak/login/callback/"


@pytest.fixture
def sso(settings, keycloak_admin):
    settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": keycloak.oidc_provider()}
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_ROLES_CLAIM = "roles"
    settings.OIDC_ROLE_PREFIX = "klique:"
    return keycloak_admin


@pytest.fixture
def groups():
    keycloak.create_klique_groups()


def start_login(client: Client) -> str:
    """Klique's side: the login redirects to Keycloak's authorization endpoint; its URL."""
    client.logout()
    start = client.post("/accounts/oidc/keycloak/login/")
    assert start.status_code == 302, start.content.decode()[:500]
    location = start["Location"]
    assert location.startswith(f"{keycloak.REALM}/protocol/openid-connect/auth?"), location
    assert "code_challenge_method=S256" in location
    return location


def keycloak_login(client: Client, person: keycloak.Person) -> User:
    """The whole flow; the Klique user the session is logged in as."""
    answer = keycloak.log_in_at_keycloak(start_login(client), person.username, person.password)
    assert answer.status_code == 302, answer.text[:500]
    callback = urlsplit(answer.headers["Location"])
    assert (callback.netloc, callback.path) == (keycloak.HOST, CALLBACK)
    done = client.get(f"{callback.path}?{callback.query}")
    assert done.status_code == 302 and done["Location"] == "/", done.content.decode()[:500]
    return User.objects.get(pk=client.session["_auth_user_id"])


def held(user: User) -> set[tuple[str, str, str]]:
    return {(m.group.slug, m.role, m.source) for m in user.memberships.select_related("group")}


@pytest.fixture
def client():
    return Client(HTTP_HOST=keycloak.HOST)


def test_a_keycloak_login_logs_in_and_grants_the_groups_and_client_roles_keycloak_holds(client, sso, groups):
    person = sso.create_person(
        groups=["klique:perception", "payroll-admins"], client_roles=["klique:vision:department_head"]
    )
    user = keycloak_login(client, person)
    assert (user.username, user.email) == (person.username, person.email)
    assert held(user) == {("perception", "member", IDP), ("vision", "department_head", IDP)}
    assert client.get("/work/").status_code == 200


def test_each_keycloak_login_resyncs_the_memberships_after_the_groups_change_in_keycloak(client, sso, groups):
    person = sso.create_person(groups=["klique:perception:team_lead", "klique:generation"])
    user = keycloak_login(client, person)
    assert held(user) == {("perception", "team_lead", IDP), ("generation", "member", IDP)}
    accounts.add_membership(user=user, group=Group.objects.get(slug="acme"), role=Membership.Role.FINANCE)

    sso.set_groups(person, ["klique:perception", "klique:acme:finance", "klique:vision:department_head"])
    again = keycloak_login(client, person)
    assert again.pk == user.pk
    assert held(user) == {
        ("perception", "member", IDP),
        ("vision", "department_head", IDP),
        ("acme", "finance", Membership.Source.KLIQUE),
    }

    sso.set_groups(person, [])
    keycloak_login(client, person)
    assert held(user) == {("acme", "finance", Membership.Source.KLIQUE)}


def test_a_wrong_password_at_keycloak_logs_no_one_in(client, sso, groups):
    person = sso.create_person(groups=["klique:perception"])
    answer = keycloak.log_in_at_keycloak(start_login(client), person.username, "not-the-password")
    assert answer.status_code == 200 and "Location" not in answer.headers
    assert "Invalid username or password." in answer.text
    assert "_auth_user_id" not in client.session
    assert not User.objects.filter(username=person.username).exists()


def test_a_callback_with_a_code_keycloak_never_issued_logs_no_one_in(client, sso, groups):
    """The state is the real one of this login; the code is made up, so Keycloak's token endpoint
    refuses to exchange it."""
    state = parse_qs(urlsplit(start_login(client)).query)["state"][0]
    forged = client.get(CALLBACK, {"state": state, "code": "made-up", "iss": keycloak.REALM})
    assert forged.status_code == 401 and "_auth_user_id" not in client.session
    assert not Membership.objects.filter(source=IDP).exists()
