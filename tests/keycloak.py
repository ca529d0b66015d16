"""The real Keycloak of deploy/dev-services/keycloak (its `klique` realm) for the identity-provider
tests: its admin REST API, and a person's side of its real login page, driven with httpx."""

import html
import http.cookiejar
import os
import re
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import httpx

URL = os.environ.get("KEYCLOAK_URL", "http://127.0.0.1:8180").rstrip("/")
REALM = f"{URL}/realms/klique"
ADMIN = f"{URL}/admin/realms/klique"
OIDC_CLIENT_ID = "klique"
OIDC_SECRET = "klique-dev-secret"
SAML_ENTITY_ID = "klique-saml"
SAML_METADATA_URL = f"{REALM}/protocol/saml/descriptor"
# The Django test client's host: Keycloak's clients accept redirects to any port on 127.0.0.1.
HOST = "127.0.0.1:8000"


def oidc_provider() -> dict:
    """allauth's ``SOCIALACCOUNT_PROVIDERS["openid_connect"]`` for the realm's OIDC client."""
    app = {
        "provider_id": "keycloak",
        "name": "Keycloak",
        "client_id": OIDC_CLIENT_ID,
        "secret": OIDC_SECRET,
        "settings": {"server_url": REALM},
    }
    return {"APPS": [app], "OAUTH_PKCE_ENABLED": True}


def saml_provider(**env: str) -> dict:
    """allauth's ``SOCIALACCOUNT_PROVIDERS["saml"]`` for the realm's SAML client, as the settings
    build it from the environment (``env`` adds to it)."""
    from klique.settings.sso import saml_apps

    env = {"SAML_IDP_METADATA_URL": SAML_METADATA_URL, "SAML_ENTITY_ID": SAML_ENTITY_ID, **env}
    return {"APPS": saml_apps(env)}


def create_klique_groups() -> None:
    """Klique's side of the realm's `klique:` groups: Acme > Vision > Perception, Generation."""
    from apps.accounts import services as accounts
    from apps.accounts.models import Group

    acme = accounts.create_group(name="Acme", slug="acme", kind=Group.Kind.ORGANISATION)
    vision = accounts.create_group(name="Vision", slug="vision", kind=Group.Kind.DEPARTMENT, parent=acme)
    for slug in ("perception", "generation"):
        accounts.create_group(name=slug.title(), slug=slug, kind=Group.Kind.TEAM, parent=vision)


def answers() -> str | None:
    """None when the realm's discovery document answers, else why not."""
    try:
        httpx.get(f"{REALM}/.well-known/openid-configuration", timeout=5).raise_for_status()
    except httpx.HTTPError as error:
        return f"{error!r}"
    return None


@dataclass
class Person:
    id: str
    username: str
    email: str
    password: str


class Admin:
    """Keycloak's admin REST API as the master realm's bootstrap admin."""

    def __init__(self):
        token = httpx.post(
            f"{URL}/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": os.environ.get("KEYCLOAK_ADMIN", "admin"),
                "password": os.environ.get("KEYCLOAK_ADMIN_PASSWORD", "admin"),
            },
            timeout=30,
        )
        token.raise_for_status()
        self.http = httpx.Client(
            base_url=ADMIN, headers={"Authorization": f"Bearer {token.json()['access_token']}"}, timeout=30
        )
        self.created: list[str] = []

    def group_ids(self) -> dict[str, str]:
        answer = self.http.get("/groups", params={"max": 500, "briefRepresentation": "true"})
        return {g["name"]: g["id"] for g in answer.raise_for_status().json()}

    def create_person(self, *, groups: list[str] = (), client_roles: list[str] = ()) -> Person:
        """A new person in the realm (a unique username per test), with a password and these
        groups and `klique` client roles."""
        name = f"kc-{uuid.uuid4().hex[:10]}"
        person = Person("", name, f"{name}@acme.example", f"pw-{uuid.uuid4().hex}")
        answer = self.http.post(
            "/users",
            json={
                "username": name,
                "email": person.email,
                "emailVerified": True,
                "firstName": "Test",
                "lastName": name,
                "enabled": True,
                "credentials": [{"type": "password", "value": person.password, "temporary": False}],
            },
        )
        answer.raise_for_status()
        person.id = answer.headers["Location"].rsplit("/", 1)[1]
        self.created.append(person.id)
        self.set_groups(person, groups)
        if client_roles:
            self.grant_client_roles(person, client_roles)
        return person

    def set_groups(self, person: Person, names) -> None:
        """Make the person's groups exactly ``names``."""
        ids = self.group_ids()
        answer = self.http.get(f"/users/{person.id}/groups").raise_for_status()
        held = {g["name"]: g["id"] for g in answer.json()}
        for name in set(held) - set(names):
            self.http.delete(f"/users/{person.id}/groups/{held[name]}").raise_for_status()
        for name in set(names) - set(held):
            self.http.put(f"/users/{person.id}/groups/{ids[name]}").raise_for_status()

    def grant_client_roles(self, person: Person, names) -> None:
        client = self.http.get("/clients", params={"clientId": OIDC_CLIENT_ID}).raise_for_status().json()[0]
        roles = [
            self.http.get(f"/clients/{client['id']}/roles/{quote(name, safe='')}").raise_for_status().json()
            for name in names
        ]
        mappings = f"/users/{person.id}/role-mappings/clients/{client['id']}"
        self.http.post(mappings, json=roles).raise_for_status()

    def close(self) -> None:
        for user_id in self.created:
            self.http.delete(f"/users/{user_id}")
        self.http.close()


class LoopbackIsSecure(http.cookiejar.DefaultCookiePolicy):
    """As a browser does: Keycloak's ``Secure`` cookies go to http://127.0.0.1 (a secure context to
    browsers, plain http to Python's cookie jar), and its ``Version=1`` attribute is ignored."""

    def set_ok_version(self, cookie, request) -> bool:
        return True

    def return_ok_version(self, cookie, request) -> bool:
        return True

    def return_ok_secure(self, cookie, request) -> bool:
        return not cookie.secure or request.host.split(":")[0] in {"127.0.0.1", "localhost"}


class Browser:
    """httpx with a browser's cookie rules (LoopbackIsSecure): httpx copies its jar into a default
    one at each request, so this client keeps the jar itself."""

    def __init__(self):
        self.jar = http.cookiejar.CookieJar(policy=LoopbackIsSecure())
        self.http = httpx.Client(timeout=30, follow_redirects=False)

    def request(self, method: str, url: str, **kwargs) -> httpx.Response:
        request = self.http.build_request(method, url, **kwargs)
        httpx.Cookies(self.jar).set_cookie_header(request)
        response = self.http.send(request)
        httpx.Cookies(self.jar).extract_cookies(response)
        self.http.cookies.clear()
        return response

    def get(self, url: str, **kwargs) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.http.close()


LOGIN_FORM = re.compile(r'<form[^>]*id="kc-form-login"[^>]*action="([^"]+)"', re.S)
POST_FORM = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"', re.S | re.I)
HIDDEN = re.compile(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', re.S | re.I)


def log_in_at_keycloak(url: str, username: str, password: str) -> httpx.Response:
    """Follow ``url`` (the redirect to Keycloak) as a fresh browser would, fill Keycloak's real
    login page and submit it; Keycloak's answer to the form, not followed."""
    with Browser() as person:
        page = person.get(url)
        assert page.status_code == 200, page.text[:500]
        form = LOGIN_FORM.search(page.text)
        assert form, f"no login form on Keycloak's page: {page.text[:500]}"
        return person.post(
            html.unescape(form.group(1)),
            data={"username": username, "password": password, "credentialId": ""},
        )


def auto_post_form(page: str) -> tuple[str, dict[str, str]]:
    """The action and hidden fields of the auto-submitting form of a SAML POST binding."""
    form = POST_FORM.search(page)
    assert form, f"no POST form in the page: {page[:500]}"
    return html.unescape(form.group(1)), {n: html.unescape(v) for n, v in HIDDEN.findall(page)}
