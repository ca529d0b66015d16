"""A tenant admin is IT for one subtree (rule: they see and change inside it, in the admin, the
portal and the API, and nothing outside it; the root's own policy and compute resources stay IT's;
they connect their groups only to the available profiles, those a policy in the subtree is
connected to; they never give an estate role).

The demo estate; ``tenant`` is the tenant admin of Language (teams Pretraining and Alignment).
IT also connected Language's own policy to h100-8 (disabled: nobody submits at the root)."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from apps.policies import services as policies
from apps.policies.models import ComputeResource, PolicyChange, Profile, ResourcePolicy
from apps.portal import demo
from tests.channels.conftest import client_for
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

Role = Membership.Role
INSIDE = {"language", "pretraining", "alignment"}
# Profiles a policy in Language's subtree is connected to; l40s-1 and a100-quarter are not.
AVAILABLE = {"h100-8", "gpu-flex", "cpu-only", "a100-1", "sovereign-a100-1"}
NO_INLINES = {
    f"{prefix}-{count}": "0"
    for prefix in ("compute_resources", "extra_budgets", "memberships", "children")
    for count in ("TOTAL_FORMS", "INITIAL_FORMS")
}


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def change_url(model: str, pk: int) -> str:
    return reverse(f"admin:{model.replace('.', '_')}_change", args=[pk])


@pytest.fixture
def tenant(db) -> User:
    demo.seed()
    user = User.objects.create_user("tenant-language", password="x")
    accounts.add_membership(user=user, group=Group.objects.get(slug="language"), role=Role.TENANT_ADMIN)
    language = policy("language")
    resource = policies.connect(policy=language, profile=Profile.objects.get(name="h100-8"))
    ComputeResource.objects.filter(pk=resource.pk).update(enabled=False)
    return User.objects.get(pk=user.pk)


@pytest.fixture
def client(tenant) -> Client:
    client = Client()
    client.force_login(tenant)
    return client


def policy_form(p: ResourcePolicy, **changes) -> dict:
    return {
        "group": p.group_id,
        "reservation": p.reservation,
        "limit": p.limit,
        "budget_hours": "" if p.budget_hours is None else p.budget_hours,
        "budget_period": p.budget_period,
        "alert_threshold": p.alert_threshold,
        "max_preemptions_per_hour": "",
        "seen_version": p.version,
        **NO_INLINES,
    } | changes


def listed(client, name: str) -> set[str]:
    """The row labels of an admin changelist (its links to change pages)."""
    page = client.get(reverse(f"admin:{name}_changelist") + "?all=")
    assert page.status_code == 200
    return set(page.context["cl"].result_list.values_list("pk", flat=True))


# The role and the admin's permissions.


def test_the_tenant_admin_role_makes_staff_with_the_tenant_permissions_and_losing_it_takes_them(tenant):
    assert tenant.is_staff and not tenant.is_superuser
    assert tenant.has_perm("policies.change_resourcepolicy") and tenant.has_perm("accounts.add_membership")
    assert not tenant.has_perm("policies.change_profile") and not tenant.has_perm("pools.view_pool")
    assert not tenant.has_perm("pricing.change_price") and not tenant.has_perm("accounts.view_user")
    accounts.remove_membership(tenant.memberships.get())
    tenant.refresh_from_db()
    assert not tenant.is_staff and not tenant.groups.exists()


@pytest.mark.parametrize(
    "name",
    ["pools_pool", "policies_profile", "pricing_price", "accounts_user", "tasks_task", "engine_engineswitch"],
)
def test_pools_profiles_prices_people_and_the_engine_stay_its(client, name):
    assert client.get(reverse(f"admin:{name}_changelist")).status_code == 403


# Lists, change forms, choices, autocomplete and filters in the admin: the subtree only.


def test_the_admin_lists_only_the_subtree(client):
    inside = {policy(slug).pk for slug in INSIDE}
    assert listed(client, "policies_resourcepolicy") == inside
    groups = listed(client, "accounts_group")
    assert groups == set(Group.objects.filter(slug__in=INSIDE).values_list("pk", flat=True))
    resources = ComputeResource.objects.filter(pk__in=listed(client, "policies_computeresource"))
    assert {r.policy.group.slug for r in resources} == INSIDE
    members = Membership.objects.filter(pk__in=listed(client, "accounts_membership"))
    assert {m.group.slug for m in members} == INSIDE
    assert {
        c.policy.group.slug
        for c in PolicyChange.objects.filter(pk__in=listed(client, "policies_policychange"))
    } <= INSIDE


def test_a_policy_below_the_root_is_changed_in_the_admin_and_audited(client, tenant):
    pretraining = policy("pretraining")
    response = client.post(
        change_url("policies.resourcepolicy", pretraining.pk), policy_form(pretraining, reservation="40")
    )
    assert response.status_code == 302
    assert policy("pretraining").reservation == 40
    change = PolicyChange.objects.get(policy=pretraining)
    assert change.actor == tenant and change.via == PolicyChange.Via.ADMIN


def test_a_change_beyond_the_roots_envelope_is_refused_with_the_rule(client):
    pretraining = policy("pretraining")
    response = client.post(
        change_url("policies.resourcepolicy", pretraining.pk), policy_form(pretraining, reservation="70")
    )
    assert response.status_code == 200 and "above its reservation (80)" in response.content.decode()
    assert policy("pretraining").reservation == 48


def test_the_roots_own_policy_is_shown_but_stays_its(client):
    language = policy("language")
    url = change_url("policies.resourcepolicy", language.pk)
    assert client.get(url).status_code == 200
    assert client.post(url, policy_form(language, reservation="90")).status_code == 403
    assert policy("language").reservation == 80


@pytest.mark.parametrize("model", ["policies.resourcepolicy", "accounts.group"])
@pytest.mark.parametrize("action", ["change", "delete", "history"])
def test_an_object_outside_the_subtree_is_not_found_by_its_id(client, model, action):
    target = policy("vision") if model == "policies.resourcepolicy" else Group.objects.get(slug="vision")
    url = reverse(f"admin:{model.replace('.', '_')}_{action}", args=[target.pk])
    assert client.get(url).status_code == 404
    assert client.post(url, {"post": "yes"}).status_code == 404
    assert ResourcePolicy.objects.filter(group__slug="vision").exists()


def test_delete_selected_reaches_only_the_rows_the_tenant_changes(client):
    """The action asks ``has_delete_permission`` of each row: the root's and estate roles' say no."""
    url = reverse("admin:policies_resourcepolicy_changelist")
    root, vision = policy("language"), policy("vision")
    for chosen in (root, vision):
        data = {"action": "delete_selected", "_selected_action": [chosen.pk], "post": "yes"}
        client.post(url, data)
        assert ResourcePolicy.objects.filter(pk=chosen.pk).exists()
    cio = User.objects.get(username="cio")
    estate = accounts.add_membership(
        user=cio, group=Group.objects.get(slug="alignment"), role=Role.LEADERSHIP
    )
    url = reverse("admin:accounts_membership_changelist")
    client.post(url, {"action": "delete_selected", "_selected_action": [estate.pk], "post": "yes"})
    assert Membership.objects.filter(pk=estate.pk).exists()


def test_a_resource_outside_the_subtree_is_not_found_and_not_changed(client):
    outside = ComputeResource.objects.get(name="perception/a100-1")
    url = change_url("policies.computeresource", outside.pk)
    assert client.get(url).status_code == 404
    assert client.post(url, {"name": "mine", "enabled": ""}).status_code == 404
    assert ComputeResource.objects.get(pk=outside.pk).enabled


def test_foreign_key_choices_offer_only_the_subtree_and_the_tenant_roles(client):
    form = client.get(reverse("admin:accounts_membership_add")).context["adminform"].form
    assert {g.slug for g in form.fields["group"].queryset} == INSIDE
    assert {u.username for u in form.fields["user"].queryset} == {
        "tenant-language",
        "head-language",
        "lead-pretraining",
        "dev-pretraining",
        "dev-alignment",
    }
    assert {value for value, _ in form.fields["role"].choices} == {
        "tenant_admin",
        "department_head",
        "team_lead",
        "member",
    }
    form = client.get(reverse("admin:policies_computeresource_add")).context["adminform"].form
    assert {p.group.slug for p in form.fields["policy"].queryset} == {"pretraining", "alignment"}
    assert {p.name for p in form.fields["profile"].queryset} == AVAILABLE


def test_the_group_autocomplete_finds_only_the_subtree(client):
    url = reverse("admin:autocomplete")
    params = {"app_label": "accounts", "model_name": "membership", "field_name": "group", "term": ""}
    found = json.loads(client.get(url, params).content)["results"]
    assert {row["text"] for row in found} == {"Language", "Pretraining", "Alignment"}
    params["term"] = "Vis"
    assert json.loads(client.get(url, params).content)["results"] == []


def test_the_profile_filter_of_compute_resources_lists_only_the_subtrees_profiles(client):
    page = client.get(reverse("admin:policies_computeresource_changelist"))
    spec = next(s for s in page.context["cl"].filter_specs if getattr(s, "field_path", "") == "profile")
    names = {label for _, label in spec.lookup_choices}
    assert names == AVAILABLE and "l40s-1" not in names and "a100-quarter" not in names


def test_the_tenant_connects_a_team_to_an_available_profile_and_not_to_another(client):
    alignment = policy("alignment")
    data = {"name": "alignment/h100-8-b", "policy": alignment.pk, "queuing_rank": "0", "enabled": "on"}
    ComputeResource.objects.filter(name="alignment/h100-8").delete()
    added = client.post(
        reverse("admin:policies_computeresource_add"),
        data | {"profile": Profile.objects.get(name="h100-8").pk},
    )
    assert added.status_code == 302
    assert ComputeResource.objects.filter(policy=alignment, profile__name="h100-8").exists()
    refused = client.post(
        reverse("admin:policies_computeresource_add"),
        data | {"name": "alignment/l40s", "profile": Profile.objects.get(name="l40s-1").pk},
    )
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not ComputeResource.objects.filter(policy=alignment, profile__name="l40s-1").exists()


def test_the_tenant_adds_a_group_inside_the_subtree_and_not_outside_or_at_the_top(client):
    url = reverse("admin:accounts_group_add")
    base = {"name": "Safety", "slug": "safety", "kind": "team", **NO_INLINES}
    language, vision = Group.objects.get(slug="language"), Group.objects.get(slug="vision")
    for parent in (vision.pk, ""):
        response = client.post(url, base | {"parent": parent})
        assert response.status_code == 200 and not Group.objects.filter(slug="safety").exists()
    assert client.post(url, base | {"parent": language.pk}).status_code == 302
    assert Group.objects.get(slug="safety").parent == language


def test_the_tenant_adds_members_with_tenant_roles_only(client):
    url = reverse("admin:accounts_membership_add")
    dev = User.objects.get(username="dev-alignment")
    pretraining = Group.objects.get(slug="pretraining")
    response = client.post(url, {"user": dev.pk, "group": pretraining.pk, "role": "it_admin"})
    assert response.status_code == 200 and not dev.memberships.filter(role="it_admin").exists()
    outsider = User.objects.get(username="dev-vision")
    response = client.post(url, {"user": outsider.pk, "group": pretraining.pk, "role": "member"})
    assert response.status_code == 200 and not outsider.memberships.filter(group=pretraining).exists()
    assert client.post(url, {"user": dev.pk, "group": pretraining.pk, "role": "team_lead"}).status_code == 302
    assert dev.memberships.filter(group=pretraining, role="team_lead").exists()


def test_an_estate_role_inside_the_subtree_is_shown_but_not_changed(client):
    cio = User.objects.get(username="cio")
    membership = accounts.add_membership(
        user=cio, group=Group.objects.get(slug="alignment"), role=Role.LEADERSHIP
    )
    url = change_url("accounts.membership", membership.pk)
    assert client.get(url).status_code == 200
    delete = reverse("admin:accounts_membership_delete", args=[membership.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert Membership.objects.filter(pk=membership.pk).exists()


# The portal: the tenant's page, and the department and team pages inside the subtree.


@pytest.mark.parametrize(
    "url, answer",
    [
        ("/tenants/language/", 200),
        ("/tenants/vision/", 403),
        ("/tenants/research/", 403),
        ("/departments/language/", 200),
        ("/departments/language/split/", 200),
        ("/departments/vision/", 403),
        ("/departments/vision/split/", 403),
        ("/teams/pretraining/", 200),
        ("/teams/perception/", 403),
        ("/it/", 403),
        ("/leadership/", 403),
        ("/leadership/split/", 403),
        ("/finance/", 403),
    ],
)
def test_the_portal_opens_the_subtree_and_refuses_the_rest(client, url, answer):
    assert client.get(url).status_code == answer


def test_the_tenant_page_shows_the_subtree_and_nothing_outside(client):
    page = client.get("/tenants/language/")
    body = page.content.decode()
    assert page.status_code == 200
    assert "Pretraining" in body and "pretraining/h100-8" in body and "alignment/a100-1" in body
    assert "Perception" not in body and "perception/a100-1" not in body and "Vision" not in body
    profiles = body.split('<ul id="tenant-profiles">')[1].split("</ul>")[0]
    assert profiles == "".join(f"<li>{name}</li>" for name in sorted(AVAILABLE))
    assert 'href="/tenants/language/"' in client.get("/").content.decode()


def test_the_tenant_splits_the_roots_quota_among_its_teams(client):
    data = {}
    for slug, reservation in (("alignment", "32"), ("pretraining", "40")):
        p = policy(slug)
        row = {
            "reservation": reservation,
            "limit": p.limit,
            "budget_hours": p.budget_hours,
            "budget_period": p.budget_period,
            "version": p.version,
        }
        data |= {f"p{p.pk}-{field}": value for field, value in row.items()}
    assert client.post("/departments/language/split/", data).status_code == 302
    assert policy("alignment").reservation == 32 and policy("pretraining").reservation == 40


def test_the_tenant_manages_a_teams_members_inside_and_not_outside(client):
    ranking = User.objects.get(username="dev-ranking")
    assert client.post("/teams/pretraining/members/", {"user": ranking.username}).status_code == 302
    assert client.post("/teams/perception/members/", {"user": ranking.username}).status_code == 403
    assert {m.group.slug for m in ranking.memberships.all()} == {"ranking", "pretraining"}


# The API: usage and tasks of the subtree only.


def test_the_api_serves_the_subtrees_usage_and_tasks_and_not_the_rest(tenant):
    inside = submit("dev-alignment", "alignment/a100-1")
    outside = submit("dev-vision", "perception/a100-1")
    api = client_for(tenant)
    usage = api.get("/api/v1/usage/")
    assert usage.status_code == 200
    assert {row["group"]["slug"] for row in usage.json()} == INSIDE
    assert api.get("/api/v1/usage/?group=vision").json() == []
    assert api.get(f"/api/v1/tasks/{inside.pk}/").status_code == 200
    assert api.get(f"/api/v1/tasks/{outside.pk}/").status_code == 404
    assert api.post(f"/api/v1/tasks/{outside.pk}/cancel/").status_code == 404
    assert api.post(f"/api/v1/tasks/{inside.pk}/cancel/").status_code == 200


def test_a_tenant_cannot_reorder_queues_and_what_they_connect_goes_last(client):
    """The queuing priority also orders one tenant's work against another's: it stays IT's."""
    resource = ComputeResource.objects.get(name="alignment/h100-8")
    others = list(ComputeResource.objects.filter(profile=resource.profile).exclude(pk=resource.pk))
    before = resource.queuing_rank
    changed = client.post(
        change_url("policies.computeresource", resource.pk),
        {
            "name": resource.name,
            "policy": resource.policy_id,
            "profile": resource.profile_id,
            "queuing_rank": "0",
            "enabled": "on",
        },
    )
    assert changed.status_code == 302
    assert ComputeResource.objects.get(pk=resource.pk).queuing_rank == before
    resource.delete()
    added = client.post(
        reverse("admin:policies_computeresource_add"),
        {
            "name": "alignment/h100-8-b",
            "policy": policy("alignment").pk,
            "profile": resource.profile_id,
            "queuing_rank": "0",
            "enabled": "on",
        },
    )
    assert added.status_code == 302
    new = ComputeResource.objects.get(name="alignment/h100-8-b")
    assert new.queuing_rank > max(o.queuing_rank for o in others)


def test_moving_a_group_that_would_break_an_envelope_is_refused_on_the_parent(client):
    """Sub (40 reserved) fits under Pretraining (48); moved under Language, the reservations directly
    under Language's 80 would add up to more: refused, and nothing moves."""
    pretraining = Group.objects.get(slug="pretraining")
    sub = accounts.create_group(name="Sub", slug="sub", kind=Group.Kind.PROJECT, parent=pretraining)
    ResourcePolicy.objects.create(group=sub, reservation=40, limit=40)
    language = Group.objects.get(slug="language")
    data = {"name": "Sub", "slug": "sub", "kind": "project", "parent": language.pk, **NO_INLINES}
    refused = client.post(change_url("accounts.group", sub.pk), data)
    assert refused.status_code == 200
    assert "above its reservation" in refused.content.decode()
    assert Group.objects.get(pk=sub.pk).parent_id == pretraining.pk


def test_a_form_count_beyond_what_a_person_needs_is_refused_on_the_group_page(client):
    """docs/limits.md, forms per request: an inline builds at most its existing rows plus
    ``NEW_ROWS``; a POST claiming 2,000 child groups is refused with the formset's error (it was
    minutes of building forms) and nothing changes."""
    from apps.core.formsets import NEW_ROWS

    pretraining = Group.objects.get(slug="pretraining")
    data = {"name": "Pretraining", "slug": "pretraining", "kind": pretraining.kind, **NO_INLINES}
    data |= {"parent": pretraining.parent_id, "children-TOTAL_FORMS": "2000"}
    response = client.post(change_url("accounts.group", pretraining.pk), data)
    assert response.status_code == 200
    (children,) = [s for s in response.context["inline_admin_formsets"] if s.formset.prefix == "children"]
    assert f"Please submit at most {NEW_ROWS} forms." in children.formset.non_form_errors()
    assert len(children.formset.forms) <= NEW_ROWS
