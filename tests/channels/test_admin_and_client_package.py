"""IT's view of tokens and schedules in the admin, and the client package importing no Django."""

import subprocess
import sys

import pytest
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import ApiToken
from apps.tasks import services
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_it_sees_tokens_without_their_secret_and_revokes_them(admin_client):
    token, raw = accounts.create_api_token(user=UserFactory(), name="leaked")
    page = admin_client.get(reverse("admin:accounts_apitoken_changelist"))
    assert b"leaked" in page.content and raw.encode() not in page.content
    assert (
        token.token_hash.encode()
        not in admin_client.get(reverse("admin:accounts_apitoken_change", args=[token.pk])).content
    )
    assert admin_client.get(reverse("admin:accounts_apitoken_add")).status_code == 403
    admin_client.post(
        reverse("admin:accounts_apitoken_changelist"), {"action": "revoke", "_selected_action": [token.pk]}
    )
    assert ApiToken.objects.get(pk=token.pk).status == "revoked"


def test_it_sees_schedules_and_pauses_them_but_does_not_write_them(admin_client, estate):
    schedule = services.create_schedule(
        owner=estate.member,
        name="nightly",
        cron="0 2 * * *",
        compute_resource=estate.vision_a100,
        command="x",
    )
    assert b"nightly" in admin_client.get(reverse("admin:tasks_schedule_changelist")).content
    assert admin_client.get(reverse("admin:tasks_schedule_add")).status_code == 403
    admin_client.post(
        reverse("admin:tasks_schedule_changelist"), {"action": "pause", "_selected_action": [schedule.pk]}
    )
    schedule.refresh_from_db()
    assert not schedule.active and schedule.next_run_at is None


def test_the_client_package_imports_no_django():
    code = (
        "import sys, klique.client, klique.client.cli, klique.client.mcp_server;"
        "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"}).returncode == 0
