"""A deactivated user is locked out in one request: the provider's one PATCH (or DELETE) ends
their portal sessions and revokes their API tokens at once, so the next portal page and the next
API call (a task submission included) are refused; running work keeps running and the team leads
of the groups owning it are told; reactivation lets them sign in again, tokens staying revoked."""

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from rest_framework.test import APIClient

from apps.accounts import services as accounts
from apps.accounts.models import Membership, Notification, User
from apps.policies import services as policies
from apps.tasks.models import Task
from tests.factories import MembershipFactory, PolicyFactory, PoolFactory, ProfileFactory, UserFactory
from tests.scim.conftest import PATCH, entra_user

pytestmark = pytest.mark.django_db
OFF = {"schemas": [PATCH], "Operations": [{"op": "Replace", "path": "active", "value": "False"}]}
ON = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": True}}]}


@pytest.fixture
def resource():
    profile = ProfileFactory(name="a100", gpus=1)
    policies.link_pool(profile, PoolFactory(name="gpu"))
    return policies.connect(policy=PolicyFactory(limit=8, reservation=0), profile=profile, name="vision/a100")


@pytest.fixture
def alice(scim, resource):
    uid = scim.post("Users", entra_user()).json_body["id"]
    user = User.objects.get(username="alice@contoso.com")
    MembershipFactory(user=user, group=resource.policy.group)
    return uid, user


def portal(user) -> Client:
    client = Client()
    client.force_login(user)
    assert client.get("/account/tokens/").status_code == 200
    return client


def api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def submit(token: str):
    return api(token).post(
        "/api/v1/tasks/", {"compute_resource": "vision/a100", "command": "train"}, format="json"
    )


@pytest.mark.parametrize("how", ["patch", "delete"])
def test_one_request_locks_the_user_out_of_the_portal_and_the_api(scim, alice, how):
    uid, user = alice
    browser = portal(user)
    session_key = browser.session.session_key
    _, token = accounts.create_api_token(user=user, name="laptop")
    assert submit(token).status_code == 201

    answer = scim.patch(f"Users/{uid}", OFF) if how == "patch" else scim.delete(f"Users/{uid}")
    assert answer.status_code in (200, 204)

    assert not Session.objects.filter(session_key=session_key).exists()
    page = browser.get("/account/tokens/")
    assert page.status_code == 302 and "login" in page["Location"]
    assert submit(token).status_code == 401
    assert api(token).get("/api/v1/tasks/").status_code == 401
    assert not user.api_tokens.filter(revoked_at__isnull=True).exists()
    assert not Client().login(username=user.username, password="anything")


def test_running_work_keeps_running_and_the_team_lead_is_told(scim, alice, resource):
    uid, user = alice
    lead = UserFactory(username="lena")
    MembershipFactory(user=lead, group=resource.policy.group, role=Membership.Role.TEAM_LEAD)
    _, token = accounts.create_api_token(user=user, name="laptop")
    task = Task.objects.get(pk=submit(token).json()["id"])
    Task.objects.filter(pk=task.pk).update(state=Task.State.RUNNING)

    scim.patch(f"Users/{uid}", OFF)

    assert Task.objects.get(pk=task.pk).state == Task.State.RUNNING
    notice = Notification.objects.get(user=lead)
    assert notice.kind == "owner_deactivated" and "alice@contoso.com" in notice.message
    assert not Notification.objects.filter(user=user).exists()


def test_queued_work_of_a_deactivated_user_is_cancelled_and_running_work_is_not(scim, alice, resource):
    uid, user = alice
    _, token = accounts.create_api_token(user=user, name="laptop")
    queued = Task.objects.get(pk=submit(token).json()["id"])
    running = Task.objects.get(pk=submit(token).json()["id"])
    Task.objects.filter(pk=running.pk).update(state=Task.State.RUNNING)

    scim.patch(f"Users/{uid}", OFF)

    assert Task.objects.get(pk=queued.pk).state == Task.State.CANCELED
    assert Task.objects.get(pk=running.pk).state == Task.State.RUNNING


def test_no_running_work_no_notice(scim, alice, resource):
    uid, _ = alice
    MembershipFactory(user=UserFactory(), group=resource.policy.group, role=Membership.Role.TEAM_LEAD)
    scim.patch(f"Users/{uid}", OFF)
    assert not Notification.objects.exists()


def test_reactivation_lets_them_sign_in_again_with_tokens_still_revoked(scim, alice):
    uid, user = alice
    user.set_password("pw-for-tests-only")
    user.save()
    _, token = accounts.create_api_token(user=user, name="laptop")
    scim.patch(f"Users/{uid}", OFF)
    assert scim.patch(f"Users/{uid}", ON).json_body["active"] is True
    assert User.objects.get(pk=user.pk).is_active
    assert Client().login(username=user.username, password="pw-for-tests-only")
    assert submit(token).status_code == 401


def test_a_user_created_inactive_is_locked_out_from_the_start(scim):
    answer = scim.post("Users", entra_user(name="dora@contoso.com") | {"active": False})
    assert answer.status_code == 201 and answer.json_body["active"] is False
    assert not User.objects.get(username="dora@contoso.com").is_active
