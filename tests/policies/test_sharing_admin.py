"""IT sets the issue-34 sharing settings in the admin: a policy's lendable part (at most its
reservation), lending among its children (priority or fair) and over-quota weight (0 or more),
recorded in the quota audit trail; a profile's starvation guard (default 600 s, empty: off) and
default and maximum priority; a compute resource's own default and maximum; priority classes.
Bad input is refused on the field it concerns, with the reason."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies import services as policies
from apps.policies.models import ComputeResource, PolicyChange, PriorityClass, Profile
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory
from tests.policies.test_anti_thrash_admin import policy_form, profile_form

pytestmark = pytest.mark.django_db


@pytest.fixture
def it_client(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return client


def _change_url(policy):
    return reverse("admin:policies_resourcepolicy_change", args=[policy.pk])


def _field_errors(answer, field):
    assert answer.status_code == 200, answer.status_code
    return [str(message) for message in answer.context["adminform"].form.errors.get(field, [])]


@pytest.fixture
def policy():
    return policies.create_policy(group=GroupFactory(name="Team", slug="team"), reservation=4, limit=8)


def test_the_policy_page_shows_the_lending_section_with_help_text(it_client, policy):
    page = it_client.get(_change_url(policy)).content.decode()
    assert ">Lending<" in page
    for name in ("lendable", "lending", "over_quota_weight"):
        assert f'name="{name}"' in page
    assert "Empty: all of the reservation may be lent." in page
    assert "in proportion to each child" in page


def test_the_policy_admin_saves_lending_weight_and_lendable_and_audits_them(it_client, policy):
    form = policy_form(it_client, policy, lending="fair", over_quota_weight="2.5", lendable="1.5")
    answer = it_client.post(_change_url(policy), form)
    assert answer.status_code == 302, answer.content.decode()[:3000]
    policy.refresh_from_db()
    assert (policy.lending, policy.over_quota_weight, policy.lendable) == (
        "fair",
        Decimal("2.5"),
        Decimal("1.5"),
    )
    change = PolicyChange.objects.get(policy=policy)
    assert change.via == PolicyChange.Via.ADMIN
    assert change.changes == {
        "lending": ["priority", "fair"],
        "over_quota_weight": ["1.000", "2.500"],
        "lendable": [None, "1.500"],
    }


def test_lending_fair_on_a_policy_without_children_is_allowed(it_client, policy):
    answer = it_client.post(_change_url(policy), policy_form(it_client, policy, lending="fair"))
    assert answer.status_code == 302
    policy.refresh_from_db()
    assert policy.lending == "fair"


def test_a_form_without_the_lending_fields_keeps_the_policy_values(it_client, policy):
    policies.update_policy(policy, lending="fair", over_quota_weight=Decimal(3))
    answer = it_client.post(_change_url(policy), policy_form(it_client, policy, limit="6"))
    assert answer.status_code == 302, answer.content.decode()[:3000]
    policy.refresh_from_db()
    assert (policy.limit, policy.lending, policy.over_quota_weight) == (6, "fair", 3)


def test_lendable_above_the_reservation_is_refused_on_the_field(it_client, policy):
    answer = it_client.post(_change_url(policy), policy_form(it_client, policy, lendable="5"))
    assert _field_errors(answer, "lendable") == [
        "Lendable (5) cannot exceed the reservation (4); leave it empty to lend all of the reservation."
    ]
    policy.refresh_from_db()
    assert policy.lendable is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lendable", "-1"),
        ("lendable", "0.0001"),
        ("over_quota_weight", "-0.5"),
        ("over_quota_weight", "1e3"),
        ("lending", "weighted"),
    ],
)
def test_a_bad_lending_setting_is_refused_on_its_field(it_client, policy, field, value):
    answer = it_client.post(_change_url(policy), policy_form(it_client, policy, **{field: value}))
    assert _field_errors(answer, field), answer.context["adminform"].form.errors
    assert not PolicyChange.objects.filter(policy=policy).exists()


def test_the_policy_rules_refuse_lendable_above_the_reservation_by_field(policy):
    with pytest.raises(ValidationError) as refused:
        policies.update_policy(policy, lendable=Decimal(5))
    assert list(refused.value.message_dict) == ["lendable"]
    policies.update_policy(policy, lendable=Decimal(4))  # all of it, named
    policies.update_policy(policy, reservation=Decimal(4), lendable=Decimal(0))


def test_the_profile_admin_saves_the_starvation_guard_and_reads_empty_as_off(it_client):
    profile = ProfileFactory(name="a100")
    assert Profile.objects.get(pk=profile.pk).starvation_s == 600
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    page = it_client.get(url).content.decode()
    assert 'name="starvation_s"' in page and "holds a pool against new starts" in page
    assert it_client.post(url, profile_form(profile, starvation_s="120")).status_code == 302
    profile.refresh_from_db()
    assert profile.starvation_s == 120
    assert it_client.post(url, profile_form(profile, starvation_s="")).status_code == 302
    profile.refresh_from_db()
    assert profile.starvation_s is None
    answer = it_client.post(url, profile_form(profile, starvation_s="-5"))
    assert _field_errors(answer, "starvation_s")


def test_the_profile_admin_refuses_a_default_priority_above_its_maximum_on_the_field(it_client):
    profile = ProfileFactory(name="a100")
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    answer = it_client.post(url, profile_form(profile, default_priority="300", max_priority="200"))
    assert _field_errors(answer, "default_priority") == [
        "Default priority (300) cannot exceed the maximum priority (200)."
    ]
    assert (
        it_client.post(url, profile_form(profile, default_priority="100", max_priority="200")).status_code
        == 302
    )
    profile.refresh_from_db()
    assert (profile.default_priority, profile.max_priority) == (100, 200)
    assert it_client.post(url, profile_form(profile, default_priority="", max_priority="")).status_code == 302
    profile.refresh_from_db()
    assert (profile.default_priority, profile.max_priority) == (0, None)


def test_a_compute_resource_default_above_the_maximum_in_force_is_refused_on_the_field(it_client, policy):
    profile = ProfileFactory(name="a100", max_priority=100)
    policies.link_pool(profile, PoolFactory())
    resource = policies.connect(policy=policy, profile=profile)
    url = reverse("admin:policies_computeresource_change", args=[resource.pk])
    base = {
        "name": resource.name,
        "policy": policy.pk,
        "profile": profile.pk,
        "queuing_rank": "0",
        "enabled": "on",
    }
    answer = it_client.post(url, {**base, "default_priority": "200", "max_priority": ""})
    assert _field_errors(answer, "default_priority") == [
        "Default priority (200) cannot exceed the maximum priority (100)."
    ]
    answer = it_client.post(url, {**base, "default_priority": "200", "max_priority": "300"})
    assert answer.status_code == 302, answer.content.decode()[:3000]
    resource.refresh_from_db()
    assert (resource.default_priority, resource.max_priority) == (200, 300)
    profile_page = reverse("admin:policies_profile_change", args=[profile.pk])
    answer = it_client.post(
        profile_page,
        profile_form(profile, default_priority="150", max_priority="100", **queue_rows(resource)),
    )
    assert _field_errors(answer, "default_priority")
    assert ComputeResource.objects.get(pk=resource.pk).default_priority == 200


def queue_rows(resource):
    """The profile page's queuing inline with its one row, as the page sends it."""
    return {
        "compute_resources-TOTAL_FORMS": "1",
        "compute_resources-INITIAL_FORMS": "1",
        "compute_resources-0-id": str(resource.pk),
        "compute_resources-0-profile": str(resource.profile_id),
        "compute_resources-0-queuing_rank": "0",
        "compute_resources-0-name": resource.name,
        "compute_resources-0-policy": str(resource.policy_id),
        "compute_resources-0-enabled": "on",
    }


def test_it_names_priority_classes_in_the_admin_and_a_repeated_value_is_refused_on_the_field(it_client):
    for name, value in (("low", 0), ("normal", 100), ("high", 200)):  # a flush may have taken the seeded ones
        PriorityClass.objects.update_or_create(name=name, defaults={"value": value})
    add = reverse("admin:policies_priorityclass_add")
    answer = it_client.post(add, {"name": "urgent", "value": "300", "description": "On call"})
    assert answer.status_code == 302, answer.content.decode()[:3000]
    assert PriorityClass.objects.get(name="urgent").value == 300
    answer = it_client.post(add, {"name": "urgent-too", "value": "300", "description": ""})
    assert _field_errors(answer, "value")
    answer = it_client.post(add, {"name": "not a slug", "value": "50", "description": ""})
    assert _field_errors(answer, "name")
    page = it_client.get(reverse("admin:policies_priorityclass_changelist")).content.decode()
    names = [page.index(f">{name}</a>") for name in ("urgent", "high", "normal", "low")]
    assert names == sorted(names), "highest value first"
