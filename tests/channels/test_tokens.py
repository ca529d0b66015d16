"""Personal API tokens: stored hashed, shown once, optional expiry, last used, revoked in the portal;
accepted as ``Authorization: Bearer``, while other bearer tokens are left to other classes."""

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.test import RequestFactory
from django.utils import timezone

from apps.accounts import services
from apps.accounts.api.authentication import PersonalTokenAuthentication
from apps.accounts.models import ApiToken
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def me(client, raw):
    return client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_only_a_hash_of_the_token_is_stored(client):
    token, raw = services.create_api_token(user=UserFactory(), name="laptop")
    assert raw.startswith("kqp_") and len(raw) > 40
    assert token.token_hash == services.hash_token(raw) and raw not in token.token_hash
    assert not ApiToken.objects.filter(token_hash=raw).exists() and raw.startswith(token.prefix)


def test_a_token_acts_as_its_user(client, estate):
    _, raw = services.create_api_token(user=estate.member, name="laptop")
    body = me(client, raw).json()
    assert body["username"] == "vera" and body["memberships"] == [
        {"group": "Vision", "group_slug": "vision", "role": "member"}
    ]


def test_an_expired_or_revoked_token_is_refused_with_401_and_a_reason(client):
    user = UserFactory()
    expiring, raw_expiring = services.create_api_token(
        user=user, name="short", expires_at=timezone.now() + timedelta(days=1)
    )
    revoked, raw_revoked = services.create_api_token(user=user, name="old")
    services.revoke_api_token(revoked)
    assert me(client, raw_expiring).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        response = me(client, raw_expiring)
    assert response.status_code == 401 and "expired" in response.json()["detail"]
    response = me(client, raw_revoked)
    assert response.status_code == 401 and "revoked" in response.json()["detail"]
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_an_inactive_users_token_is_refused(client):
    user = UserFactory()
    _, raw = services.create_api_token(user=user, name="t")
    user.is_active = False
    user.save()
    assert me(client, raw).status_code == 401


def test_last_used_is_written_at_most_once_a_minute(client):
    token, raw = services.create_api_token(user=UserFactory(), name="t")
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        me(client, raw)
    token.refresh_from_db()
    assert token.last_used_at == start
    with time_machine.travel(start + timedelta(seconds=30), tick=False):
        me(client, raw)
    token.refresh_from_db()
    assert token.last_used_at == start
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        me(client, raw)
    token.refresh_from_db()
    assert token.last_used_at == start + timedelta(seconds=61)


@pytest.mark.parametrize(
    "header", ["Bearer wkr_some-worker-token", "Token abc", "Bearer", "Basic dXNlcjpwdw=="]
)
def test_other_authorization_headers_are_left_to_other_classes(header):
    request = RequestFactory().get("/", HTTP_AUTHORIZATION=header)
    assert PersonalTokenAuthentication().authenticate(request) is None


def test_a_token_needs_a_name_and_a_future_expiry():
    user = UserFactory()
    with pytest.raises(ValidationError) as caught:
        services.create_api_token(user=user, name=" ")
    assert "name" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        services.create_api_token(user=user, name="x", expires_at=timezone.now() - timedelta(seconds=1))
    assert "expires_at" in caught.value.message_dict


def test_the_portal_page_creates_a_token_shown_once_and_lists_it(client):
    user = UserFactory()
    client.force_login(user)
    response = client.post("/account/tokens/", {"name": "laptop", "expires_in": "30"})
    assert response.status_code == 201
    raw = response.context["raw"]
    assert raw.encode() in response.content and response.headers["Cache-Control"].startswith("max-age=0")
    token = ApiToken.objects.get(user=user)
    assert token.token_hash == services.hash_token(raw)
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    page = client.get("/account/tokens/")
    assert raw.encode() not in page.content
    assert b"laptop" in page.content and token.prefix.encode() in page.content
    assert me(client, raw).status_code == 200


def test_the_portal_page_refuses_a_token_without_a_name(client):
    client.force_login(UserFactory())
    response = client.post("/account/tokens/", {"name": "", "expires_in": ""})
    assert response.status_code == 200 and response.context["raw"] is None
    assert not ApiToken.objects.exists()


def test_revoking_in_the_portal_stops_the_token(client):
    user = UserFactory()
    token, raw = services.create_api_token(user=user, name="laptop")
    client.force_login(user)
    response = client.post(f"/account/tokens/{token.pk}/revoke/", follow=True)
    assert b"revoked" in response.content
    assert me(client, raw).status_code == 401


def test_nobody_revokes_someone_elses_token(client):
    token, raw = services.create_api_token(user=UserFactory(), name="theirs")
    client.force_login(UserFactory())
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert client.get(f"/account/tokens/{token.pk}/revoke/").status_code == 405
    client.logout()
    assert me(client, raw).status_code == 200


def test_the_token_page_needs_a_login(client):
    response = client.get("/account/tokens/")
    assert response.status_code == 302 and "login" in response.headers["Location"]


def test_the_portal_token_list_shows_when_each_token_was_last_used(client):
    user = UserFactory()
    used, raw = services.create_api_token(user=user, name="laptop")
    services.create_api_token(user=user, name="spare")
    client.force_login(user)

    def last_used_cells():
        page = client.get("/account/tokens/").content.decode()
        assert "<th>Last used</th>" in page
        rows = re.findall(r"<tr>\s*<td>(\w+)</td>(.*?)</tr>", page, re.DOTALL)
        return {name: re.findall(r"<td>([^<]*)</td>", cells)[2] for name, cells in rows}

    assert last_used_cells() == {"laptop": "never", "spare": "never"}
    with time_machine.travel(datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC), tick=False):
        assert me(client, raw).status_code == 200
    assert last_used_cells() == {"laptop": "2026-03-04 05:06 UTC", "spare": "never"}
    used.refresh_from_db()
    assert used.last_used_at == datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
