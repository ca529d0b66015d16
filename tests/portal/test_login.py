"""Login through django-allauth: username or email and a password, password reset by email, no
self sign-up, single sign-on through an OpenID Connect provider configured from the environment."""

import json
import os
import subprocess
import sys

import pytest
from django.core import mail
from django.test import override_settings

from apps.portal import demo
from klique.settings.base import BASE_DIR

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("login", ["dev-agents", "dev-agents@acme.example"])
def test_a_person_logs_in_with_username_or_email(client, estate, login):
    response = client.post("/accounts/login/", {"login": login, "password": demo.demo_password()})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/work/").status_code == 200


def test_a_wrong_password_is_refused_on_the_form(client, estate):
    response = client.post("/accounts/login/", {"login": "dev-agents", "password": "wrong"})
    assert response.status_code == 200
    assert "The username and/or password you specified are not correct." in response.content.decode()


def test_the_login_page_is_the_portals_and_the_admin_keeps_its_own(client, settings):
    assert settings.LOGIN_URL == "account_login"
    assert client.get("/work/")["Location"] == "/accounts/login/?next=/work/"
    assert client.get("/admin/")["Location"].startswith("/admin/login/")
    page = client.get("/accounts/login/").content.decode()
    assert "Username or email" in page and "Forgot your password?" in page


def test_password_reset_sends_an_email_with_a_link(client, estate):
    response = client.post("/accounts/password/reset/", {"email": "dev-agents@acme.example"})
    assert response.status_code == 302
    assert len(mail.outbox) == 1 and "/accounts/password/reset/key/" in mail.outbox[0].body


def test_there_is_no_self_sign_up(client):
    response = client.post(
        "/accounts/signup/",
        {
            "username": "stranger",
            "email": "s@example.test",
            "password1": "a-long-pass-1",
            "password2": "a-long-pass-1",
        },
    )
    assert "Sign Up Closed" in response.content.decode()


SSO = {
    "openid_connect": {
        "APPS": [
            {
                "provider_id": "sso",
                "name": "Acme SSO",
                "client_id": "klique",
                "secret": "s3cret",
                "settings": {"server_url": "https://id.acme.example/realms/acme"},
            }
        ]
    }
}


@override_settings(SOCIALACCOUNT_PROVIDERS=SSO)
def test_a_configured_provider_is_offered_on_the_login_page(client):
    page = client.get("/accounts/login/").content.decode()
    assert "Log in with Acme SSO" in page and 'action="/accounts/oidc/sso/login/' in page


def sso_apps(**env) -> str:
    """How many OpenID Connect providers the settings configure with ``env``."""
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'klique.settings.base'; django.setup(); "
        "from django.conf import settings; "
        "print(len(settings.SOCIALACCOUNT_PROVIDERS['openid_connect']['APPS']))"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OIDC_")} | env
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, env=environment, capture_output=True, text=True
    )
    return done.stdout.strip()


def test_the_provider_comes_from_the_environment_and_only_when_set():
    assert sso_apps() == "0"
    assert (
        sso_apps(OIDC_PROVIDER_URL="https://id.acme.example", OIDC_CLIENT_ID="klique", OIDC_CLIENT_SECRET="x")
        == "1"
    )


# Login limits (issue 11, defect 6): a (username, client IP) is locked after the failure limit, on
# the admin's login page and the portal's alike, and the count lives in the shared cache.
ADMIN_LOGIN = "/admin/login/?next=/admin/"
TRIES = 30


def admin_login(client, password: str):
    return client.post(ADMIN_LOGIN, {"username": "it", "password": password, "next": "/admin/"})


def portal_login(client, password: str):
    return client.post("/accounts/login/", {"login": "it", "password": password})


@pytest.fixture
def fresh_cache():
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


def test_the_admin_login_is_locked_after_the_failure_limit_even_with_the_right_password(
    client, estate, fresh_cache
):
    answers = [admin_login(client, "wrong").status_code for _ in range(TRIES)]
    assert answers[0] == 200  # the form again, with its error
    assert 429 in answers
    locked = admin_login(client, demo.demo_password())
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert "_auth_user_id" not in client.session
    assert "Too many failed logins" in locked.content.decode()


def test_the_portal_login_is_locked_after_the_failure_limit_even_with_the_right_password(
    client, estate, fresh_cache
):
    """The lock of django-axes holds behind allauth's per-address limit (30 logins a minute, 429)."""
    for _ in range(TRIES):
        portal_login(client, "wrong")
    locked = portal_login(client, demo.demo_password())
    assert locked.status_code == 429 or "Too many failed login attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_admin_lock_counts_failures_up_to_the_limit_and_no_further(client, estate, fresh_cache, settings):
    for _ in range(settings.LOGIN_FAILURE_LIMIT - 1):
        assert admin_login(client, "wrong").status_code == 200
    assert admin_login(client, demo.demo_password()).status_code == 302  # under the limit: logs in


def test_another_username_or_address_is_not_locked_by_someone_elses_failures(client, estate, fresh_cache):
    for _ in range(TRIES):
        admin_login(client, "wrong")
    other = client.post(
        ADMIN_LOGIN, {"username": "it", "password": demo.demo_password()}, REMOTE_ADDR="10.0.0.7"
    )
    assert other.status_code == 302


def test_a_forwarded_for_header_does_not_change_the_address_without_a_trusted_proxy(
    client, estate, fresh_cache
):
    for n in range(TRIES):
        client.post(
            ADMIN_LOGIN, {"username": "it", "password": "wrong"}, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}"
        )
    assert admin_login(client, demo.demo_password()).status_code == 429


LOGIN_IN_ANOTHER_PROCESS = """
import json, sys
import django
django.setup()
from django.test import Client, override_settings
with override_settings(CACHES=json.loads(sys.argv[1])):
    client = Client()
    answer = client.post("/admin/login/?next=/admin/", {"username": "it", "password": sys.argv[2]})
    print(answer.status_code, "_auth_user_id" in client.session)
"""


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_the_lock_is_shared_through_redis_by_every_web_process(client, settings):
    """Failures counted in this process lock the login in another process that shares the cache."""
    demo.seed()
    shared = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.REDIS_URL,
            "KEY_PREFIX": "klique-test-login-lock",
        }
    }
    database = settings.DATABASES["default"]
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    environment = os.environ | {"DJANGO_SETTINGS_MODULE": "klique.settings.test", "DATABASE_URL": url}

    def other_process() -> str:
        done = subprocess.run(
            [sys.executable, "-c", LOGIN_IN_ANOTHER_PROCESS, json.dumps(shared), demo.demo_password()],
            cwd=BASE_DIR,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    from axes.handlers.proxy import AxesProxyHandler
    from django.core.cache import cache

    try:
        with override_settings(CACHES=shared):
            AxesProxyHandler.get_implementation(force=True)  # it keeps the cache it was made with
            cache.clear()
            assert other_process() == "302 True"  # the right password logs in over there
            for _ in range(settings.LOGIN_FAILURE_LIMIT):
                admin_login(client, "wrong")
            assert other_process() == "429 False"
            cache.clear()
    finally:
        AxesProxyHandler.get_implementation(force=True)


def client_from(address: str, behind_proxy: bool):
    from django.test import Client

    if behind_proxy:
        return Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=address)
    return Client(REMOTE_ADDR=address)


@pytest.mark.parametrize("behind_proxy", [False, True], ids=["direct", "behind-one-proxy"])
def test_a_portal_lock_is_per_username_and_address_so_the_owner_still_logs_in_from_elsewhere(
    estate, fresh_cache, settings, behind_proxy
):
    """docs/limits.md, failed logins: the portal's lock is keyed by username *and* client address
    (the peer's, or the one the trusted proxy reports with TRUSTED_PROXY_COUNT=1)."""
    settings.TRUSTED_PROXY_COUNT = 1 if behind_proxy else 0
    attacker, owner = client_from("198.51.100.7", behind_proxy), client_from("203.0.113.9", behind_proxy)
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        portal_login(attacker, "wrong")
    answer = portal_login(owner, demo.demo_password())
    assert answer.status_code == 302 and "_auth_user_id" in owner.session
    locked = portal_login(attacker, demo.demo_password())
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert "_auth_user_id" not in attacker.session
