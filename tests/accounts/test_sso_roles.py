"""SSO roles (docs/governance.md): at each OpenID Connect login the memberships the identity
provider grants are synced from its claims. Every login here is the real authorization-code flow
against a real OIDC provider (oidc-provider-mock, a Flask app on 127.0.0.1) started by the test."""

import logging
import threading
from urllib.parse import urlsplit

import httpx
import oidc_provider_mock
import pytest
import werkzeug.serving

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from apps.accounts.selectors import managed_group_ids

pytestmark = pytest.mark.django_db

IDP = Membership.Source.IDP
KLIQUE = Membership.Source.KLIQUE


@pytest.fixture
def provider():
    """The provider's base URL; it serves discovery, authorize, token, userinfo and JWKS."""
    server = werkzeug.serving.make_server("127.0.0.1", 0, oidc_provider_mock.app(), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(5)
    server.server_close()


@pytest.fixture
def sso(settings, provider):
    settings.SOCIALACCOUNT_PROVIDERS = {
        "openid_connect": {
            "APPS": [
                {
                    "provider_id": "sso",
                    "name": "Acme SSO",
                    "client_id": "klique",
                    "secret": "s3cret",
                    "settings": {"server_url": provider},
                }
            ],
            "OAUTH_PKCE_ENABLED": True,
        }
    }
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_ROLES_CLAIM = "roles"
    settings.OIDC_ROLE_PREFIX = "klique:"
    return provider


@pytest.fixture
def groups():
    acme = accounts.create_group(name="Acme", slug="acme", kind=Group.Kind.ORGANISATION)
    vision = accounts.create_group(name="Vision", slug="vision", kind=Group.Kind.DEPARTMENT, parent=acme)
    return {
        "acme": acme,
        "vision": vision,
        "perception": accounts.create_group(
            name="Perception", slug="perception", kind=Group.Kind.TEAM, parent=vision
        ),
        "generation": accounts.create_group(
            name="Generation", slug="generation", kind=Group.Kind.TEAM, parent=vision
        ),
    }


def sso_login(client, provider: str, sub: str, claims: dict) -> User:
    """Log ``sub`` in through the provider with ``claims``: Klique's login redirects to the
    provider's authorize endpoint, the person authorizes there, the provider redirects back to
    allauth's callback, which exchanges the code for tokens and reads the userinfo."""
    httpx.put(f"{provider}/users/{sub}", json=claims).raise_for_status()
    client.logout()
    start = client.post("/accounts/oidc/sso/login/")
    assert start.status_code == 302 and start["Location"].startswith(f"{provider}/oauth2/authorize?")
    authorized = httpx.post(start["Location"], data={"sub": sub})
    assert authorized.status_code == 302, authorized.text
    callback = urlsplit(authorized.headers["Location"])
    assert callback.path == "/accounts/oidc/sso/login/callback/"
    done = client.get(f"{callback.path}?{callback.query}")
    assert done.status_code == 302 and done["Location"] == "/", done.content.decode()[:500]
    user = User.objects.get(pk=client.session["_auth_user_id"])
    return user


def held(user: User) -> set[tuple[str, str, str]]:
    return {(m.group.slug, m.role, m.source) for m in user.memberships.select_related("group")}


def claims(*values: str, **extra) -> dict:
    """Ada's claims: values naming a role go in the roles claim, the others in the groups claim."""
    person = {"email": "ada@acme.example", "email_verified": True, "preferred_username": "ada"}
    with_role = [v for v in values if v.count(":") == 2]
    return person | {"groups": [v for v in values if v not in with_role], "roles": with_role} | extra


def test_the_first_login_grants_the_claimed_memberships_and_roles(client, sso, groups):
    user = sso_login(
        client, sso, "ada", claims("klique:perception", "klique:vision:department_head", "payroll-admins")
    )
    assert held(user) == {("perception", "member", IDP), ("vision", "department_head", IDP)}
    assert managed_group_ids(user) == {groups["vision"].pk, groups["perception"].pk, groups["generation"].pk}


def test_each_login_syncs_added_changed_and_removed_memberships_and_leaves_hand_granted_ones(
    client, sso, groups
):
    user = sso_login(
        client,
        sso,
        "ada",
        claims("klique:perception:team_lead", "klique:generation", "klique:vision:department_head"),
    )
    accounts.add_membership(user=user, group=groups["acme"], role=Membership.Role.FINANCE)
    assert held(user) == {
        ("perception", "team_lead", IDP),
        ("generation", "member", IDP),
        ("vision", "department_head", IDP),
        ("acme", "finance", KLIQUE),
    }

    again = sso_login(client, sso, "ada", claims("klique:perception:member", "klique:acme:leadership"))

    assert again.pk == user.pk
    assert held(user) == {
        ("perception", "member", IDP),
        ("acme", "leadership", IDP),
        ("acme", "finance", KLIQUE),
    }


def test_a_role_granted_by_hand_stays_when_the_claims_grant_it_too_and_then_drop_it(client, sso, groups):
    user = sso_login(client, sso, "ada", claims())
    accounts.add_membership(user=user, group=groups["vision"], role=Membership.Role.DEPARTMENT_HEAD)
    sso_login(client, sso, "ada", claims("klique:vision:department_head"))
    assert held(user) == {("vision", "department_head", KLIQUE)}
    sso_login(client, sso, "ada", claims())
    assert held(user) == {("vision", "department_head", KLIQUE)}


def test_it_admin_from_the_claims_makes_staff_and_losing_it_takes_staff_away(client, sso, groups):
    user = sso_login(client, sso, "ada", claims("klique:acme:it_admin"))
    user.refresh_from_db()
    assert user.is_staff and user.groups.filter(name=accounts.IT_ADMIN_AUTH_GROUP).exists()
    sso_login(client, sso, "ada", claims("klique:acme"))
    user.refresh_from_db()
    assert not user.is_staff and held(user) == {("acme", "member", IDP)}


def test_unknown_groups_and_roles_are_logged_and_never_created(client, sso, groups, caplog):
    with caplog.at_level(logging.WARNING, logger="apps.accounts.sso"):
        user = sso_login(
            client, sso, "ada", claims("klique:nowhere:team_lead", "klique:vision:overlord", "klique:vision")
        )
    assert held(user) == {("vision", "member", IDP)}
    assert not Group.objects.filter(slug="nowhere").exists()
    assert "'nowhere'" in caplog.text and "'klique:vision:overlord'" in caplog.text


def test_the_claim_names_and_prefix_are_settings(client, sso, groups, settings):
    settings.OIDC_GROUPS_CLAIM = "klique_groups"
    settings.OIDC_ROLES_CLAIM = ""
    settings.OIDC_ROLE_PREFIX = "gpu/"
    user = sso_login(
        client,
        sso,
        "ada",
        claims("klique:vision", klique_groups=["gpu/perception:team_lead", "gpu/vision", "other/acme"]),
    )
    assert held(user) == {("perception", "team_lead", IDP), ("vision", "member", IDP)}


def test_with_both_claim_names_empty_logins_change_no_membership(client, sso, groups, settings):
    user = sso_login(client, sso, "ada", claims("klique:vision"))
    settings.OIDC_GROUPS_CLAIM = ""
    settings.OIDC_ROLES_CLAIM = ""
    sso_login(client, sso, "ada", claims("klique:perception"))
    assert held(user) == {("vision", "member", IDP)}


def test_a_password_login_leaves_identity_provider_memberships_alone(client, sso, groups):
    user = sso_login(client, sso, "ada", claims("klique:vision:department_head"))
    user.set_password("a-long-pass-1")
    user.save()
    client.logout()
    response = client.post("/accounts/login/", {"login": "ada", "password": "a-long-pass-1"})
    assert response.status_code == 302
    assert held(user) == {("vision", "department_head", IDP)}


def test_only_a_string_or_a_list_of_strings_is_read_from_a_claim(settings):
    from apps.accounts.sso import claimed_values

    settings.OIDC_GROUPS_CLAIM, settings.OIDC_ROLES_CLAIM = "groups", "roles"
    assert claimed_values({"groups": {"klique:acme:it_admin": False}, "roles": "klique:acme"}) == [
        "klique:acme"
    ]
    assert claimed_values({"groups": ["klique:acme", 3, None], "roles": None}) == ["klique:acme"]
