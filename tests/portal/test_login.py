"""Login through django-allauth: username or email and a password, password reset by email, no
self sign-up, single sign-on through an OpenID Connect provider configured from the environment."""

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
