"""IT sets the anti-thrash guarantees in the admin: a profile's minimum runtime (seconds a placed
task is safe from reclaim; empty is 0) and a policy's cap on reclaims per hour (empty: no cap);
neither may be negative. The API's compute resources show both. The engine's use of them is in
tests/engine_live/test_anti_thrash.py."""

import re

import pytest
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies import services as policies
from tests.channels.conftest import client_for
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

NO_INLINES = {
    f"{prefix}-{count}": "0"
    for prefix in ("pool_links", "compute_resources", "extra_budgets")
    for count in ("TOTAL_FORMS", "INITIAL_FORMS")
}


@pytest.fixture
def it_client(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return client


def profile_form(profile, **extra):
    return {"name": profile.name, "gpus": "1", "time_weight": "1", "description": "", **NO_INLINES, **extra}


def policy_form(client, policy, **extra):
    url = reverse("admin:policies_resourcepolicy_change", args=[policy.pk])
    page = client.get(url).content.decode()
    version = re.search(r'name="seen_version" value="(\d+)"', page).group(1)
    return {
        "group": policy.group_id,
        "reservation": str(policy.reservation),
        "limit": str(policy.limit),
        "budget_hours": "",
        "budget_period": "",
        "alert_threshold": str(policy.alert_threshold),
        "seen_version": version,
        **NO_INLINES,
        **extra,
    }


def test_the_profile_admin_saves_the_minimum_runtime_and_reads_empty_as_zero(it_client):
    profile = ProfileFactory(name="a100")
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    assert 'name="min_runtime_s"' in it_client.get(url).content.decode()
    answer = it_client.post(url, profile_form(profile, min_runtime_s="600"))
    assert answer.status_code == 302, answer.content.decode()[:3000]
    profile.refresh_from_db()
    assert profile.min_runtime_s == 600
    assert it_client.post(url, profile_form(profile, min_runtime_s="")).status_code == 302
    profile.refresh_from_db()
    assert profile.min_runtime_s == 0
    page = it_client.get(reverse("admin:policies_profile_changelist")).content.decode()
    assert "minimum runtime" in page.lower() and "10 min" not in page  # set back to 0


@pytest.mark.parametrize("value", ["-1", "1.5", "ten"])
def test_the_profile_admin_refuses_a_minimum_runtime_that_is_not_a_whole_number_of_seconds(it_client, value):
    profile = ProfileFactory(name="a100")
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    refused = it_client.post(url, profile_form(profile, min_runtime_s=value))
    assert refused.status_code == 200 and "errorlist" in refused.content.decode()
    profile.refresh_from_db()
    assert profile.min_runtime_s == 0


def test_the_policy_admin_saves_the_cap_on_reclaims_per_hour_under_reclaim(it_client):
    policy = policies.create_policy(group=GroupFactory(name="Team"), reservation=2, limit=8)
    url = reverse("admin:policies_resourcepolicy_change", args=[policy.pk])
    page = it_client.get(url).content.decode()
    assert "<h2>Reclaim</h2>" in page or ">Reclaim<" in page
    assert 'name="max_preemptions_per_hour"' in page
    answer = it_client.post(url, policy_form(it_client, policy, max_preemptions_per_hour="2"))
    assert answer.status_code == 302, answer.content.decode()[:3000]
    policy.refresh_from_db()
    assert policy.max_preemptions_per_hour == 2
    answer = it_client.post(url, policy_form(it_client, policy, max_preemptions_per_hour="0"))
    assert answer.status_code == 302
    policy.refresh_from_db()
    assert policy.max_preemptions_per_hour == 0  # reclaim never takes this group's work
    answer = it_client.post(url, policy_form(it_client, policy, max_preemptions_per_hour=""))
    assert answer.status_code == 302
    policy.refresh_from_db()
    assert policy.max_preemptions_per_hour is None


def test_the_policy_admin_refuses_a_negative_cap(it_client):
    policy = policies.create_policy(group=GroupFactory(name="Team"), reservation=2, limit=8)
    url = reverse("admin:policies_resourcepolicy_change", args=[policy.pk])
    refused = it_client.post(url, policy_form(it_client, policy, max_preemptions_per_hour="-1"))
    assert refused.status_code == 200 and "errorlist" in refused.content.decode()
    policy.refresh_from_db()
    assert policy.max_preemptions_per_hour is None


def test_the_api_shows_the_minimum_runtime_and_the_cap_of_a_compute_resource():
    user = UserFactory()
    group = GroupFactory(name="Team", slug="team")
    accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
    profile = ProfileFactory(name="a100", min_runtime_s=600)
    policies.link_pool(profile, PoolFactory())
    capped = policies.create_policy(group=group, reservation=2, limit=8)
    policies.update_policy(capped, max_preemptions_per_hour=3)
    policies.connect(policy=capped, profile=profile)
    (row,) = client_for(user).get("/api/v1/compute-resources/").json()["results"]
    assert (row["min_runtime_s"], row["max_preemptions_per_hour"]) == (600, 3)
    policies.update_policy(capped, max_preemptions_per_hour=None)
    (row,) = client_for(user).get("/api/v1/compute-resources/").json()["results"]
    assert row["max_preemptions_per_hour"] is None
