"""SCIM Groups: a group named "klique:<slug>[:<role>]" grants its members that Klique membership
(source: identity provider), kept in step with every change of members or name, as Entra ID and
Okta send them; other groups are stored and grant nothing; Klique-granted memberships stay."""

import pytest

from apps.accounts.models import Membership, User
from tests.factories import GroupFactory, MembershipFactory
from tests.scim.conftest import GROUP, PATCH, entra_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def vision(db):
    return GroupFactory(slug="vision", name="Vision")


def people(scim, *names):
    return [
        scim.post("Users", entra_user(name=f"{n}@contoso.com", external_id=n)).json_body["id"] for n in names
    ]


def idp_roles(username):
    user = User.objects.get(username=f"{username}@contoso.com")
    return {(m.group.slug, m.role) for m in user.memberships.filter(source=Membership.Source.IDP)}


def new_group(scim, name, members=()):
    answer = scim.post(
        "Groups",
        {
            "schemas": [GROUP],
            "displayName": name,
            "externalId": name,
            "members": [{"value": m} for m in members],
        },
    )
    assert answer.status_code == 201, answer.json_body
    return answer.json_body["id"]


def test_a_klique_group_grants_its_members_the_membership(scim, vision):
    alice, bob = people(scim, "alice", "bob")
    gid = new_group(scim, "klique:vision", [alice])
    assert idp_roles("alice") == {("vision", "member")} and idp_roles("bob") == set()
    body = scim.get(f"Groups/{gid}").json_body
    assert [m["value"] for m in body["members"]] == [alice]
    assert scim.get(f"Users/{alice}").json_body["groups"][0]["value"] == gid


def test_a_role_in_the_name_grants_that_role(scim, vision):
    (alice,) = people(scim, "alice")
    new_group(scim, "klique:vision:team_lead", [alice])
    assert idp_roles("alice") == {("vision", "team_lead")}


def test_other_groups_are_stored_and_grant_nothing(scim, vision):
    (alice,) = people(scim, "alice")
    gid = new_group(scim, "All employees", [alice])
    assert scim.get(f"Groups/{gid}").json_body["displayName"] == "All employees"
    assert idp_roles("alice") == set()


def test_entra_adds_and_removes_members_with_its_patch_shapes(scim, vision):
    """Entra ID: "Add" members with a value list; "Remove" with a filtered path."""
    alice, bob = people(scim, "alice", "bob")
    gid = new_group(scim, "klique:vision")
    add = {
        "schemas": [PATCH],
        "Operations": [{"op": "Add", "path": "members", "value": [{"value": alice}, {"value": bob}]}],
    }
    assert scim.patch(f"Groups/{gid}", add).status_code == 200
    assert idp_roles("alice") == idp_roles("bob") == {("vision", "member")}
    remove = {"schemas": [PATCH], "Operations": [{"op": "Remove", "path": f'members[value eq "{alice}"]'}]}
    assert scim.patch(f"Groups/{gid}", remove).status_code == 200
    assert idp_roles("alice") == set() and idp_roles("bob") == {("vision", "member")}
    remove_by_value = {
        "schemas": [PATCH],
        "Operations": [{"op": "Remove", "path": "members", "value": [{"value": bob}]}],
    }
    assert scim.patch(f"Groups/{gid}", remove_by_value).status_code == 200
    assert idp_roles("bob") == set()


def test_okta_replaces_members_and_renames_with_its_patch_shapes(scim, vision):
    """Okta: "replace" of the members, and a rename with the id in the value."""
    GroupFactory(slug="audio")
    alice, bob = people(scim, "alice", "bob")
    gid = new_group(scim, "klique:vision", [alice])
    replace = {
        "schemas": [PATCH],
        "Operations": [
            {"op": "replace", "path": "members", "value": [{"value": bob, "display": "bob@contoso.com"}]}
        ],
    }
    assert scim.patch(f"Groups/{gid}", replace).status_code == 200
    assert idp_roles("alice") == set() and idp_roles("bob") == {("vision", "member")}
    rename = {
        "schemas": [PATCH],
        "Operations": [{"op": "replace", "value": {"id": gid, "displayName": "klique:audio"}}],
    }
    answer = scim.patch(f"Groups/{gid}", rename)
    assert answer.status_code == 200, answer.json_body
    assert idp_roles("bob") == {("audio", "member")}


def test_deleting_the_group_or_the_user_takes_the_membership_away(scim, vision):
    alice, bob = people(scim, "alice", "bob")
    gid = new_group(scim, "klique:vision", [alice, bob])
    assert scim.delete(f"Users/{alice}").status_code == 204
    assert idp_roles("alice") == set()
    assert scim.delete(f"Groups/{gid}").status_code == 204
    assert idp_roles("bob") == set()


def test_a_membership_granted_in_klique_stays(scim, vision):
    (alice,) = people(scim, "alice")
    user = User.objects.get(username="alice@contoso.com")
    MembershipFactory(user=user, group=vision, role=Membership.Role.TEAM_LEAD)
    gid = new_group(scim, "klique:vision", [alice])
    scim.delete(f"Groups/{gid}")
    assert user.memberships.filter(role=Membership.Role.TEAM_LEAD, source=Membership.Source.KLIQUE).exists()


def test_groups_filter_by_display_name_and_external_id(scim, vision):
    new_group(scim, "klique:vision")
    new_group(scim, "Other")
    by_name = scim.get("Groups", filter='displayName eq "klique:vision"').json_body
    by_external = scim.get("Groups", filter='externalId eq "Other"').json_body
    assert [g["displayName"] for g in by_name["Resources"]] == ["klique:vision"]
    assert [g["displayName"] for g in by_external["Resources"]] == ["Other"]


def test_bad_members_and_duplicate_names_are_scim_errors(scim, vision):
    answer = scim.post("Groups", {"schemas": [GROUP], "displayName": "x", "members": [{"value": "nobody"}]})
    assert answer.status_code == 400 and answer.json_body["scimType"] == "invalidValue"
    assert "nobody" in answer.json_body["detail"]
    new_group(scim, "klique:vision")
    again = scim.post("Groups", {"schemas": [GROUP], "displayName": "klique:vision"})
    assert again.status_code == 409 and again.json_body["scimType"] == "uniqueness"
    assert scim.post("Groups", {"schemas": [GROUP]}).status_code == 400


def test_a_provider_cannot_put_another_providers_users_in_its_groups(scim, other_scim, vision):
    (alice,) = people(scim, "alice")
    answer = other_scim.post(
        "Groups", {"schemas": [GROUP], "displayName": "klique:vision", "members": [{"value": alice}]}
    )
    assert answer.status_code == 400
    assert idp_roles("alice") == set()
