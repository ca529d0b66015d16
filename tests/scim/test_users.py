"""SCIM Users: created, read, listed with filters and pages, replaced, patched as Entra ID and
Okta send it, deleted; a provider sees only its own; bad input is a 400 SCIM error."""

import pytest
from django.test import Client

from apps.accounts import services as accounts
from apps.accounts.models import User
from tests.factories import UserFactory
from tests.scim.conftest import ENTERPRISE, PATCH, USER, entra_user

pytestmark = pytest.mark.django_db
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


def test_a_created_user_is_a_klique_user_and_reads_back(scim):
    answer = scim.post("Users", entra_user())
    assert answer.status_code == 201, answer.json_body
    assert answer["Content-Type"] == "application/scim+json"
    body = answer.json_body
    assert answer["Location"] == body["meta"]["location"] and body["id"] in answer["Location"]
    user = User.objects.get(username="alice@contoso.com")
    assert (user.email, user.first_name, user.last_name, user.is_active) == (
        "alice@contoso.com",
        "Alice",
        "Liddell",
        True,
    )
    assert not user.has_usable_password()
    read = scim.get(f"Users/{body['id']}").json_body
    assert read["userName"] == "alice@contoso.com" and read["externalId"] == "0a21f0f2-8d2a"
    assert read[ENTERPRISE]["department"] == "Research" and read["active"] is True


def test_a_taken_user_name_is_a_409_uniqueness_error(scim, other_scim):
    assert scim.post("Users", entra_user()).status_code == 201
    again = scim.post("Users", entra_user(name="ALICE@contoso.com"))
    assert again.status_code == 409 and again.json_body["scimType"] == "uniqueness"
    assert other_scim.post("Users", entra_user()).status_code == 409


def test_an_existing_account_no_provider_holds_is_adopted(scim):
    existing = UserFactory(username="bob@contoso.com")
    answer = scim.post("Users", entra_user(name="bob@contoso.com"))
    assert answer.status_code == 201
    assert User.objects.filter(username__iexact="bob@contoso.com").count() == 1
    assert existing.scim.scim_id.hex == answer.json_body["id"].replace("-", "")


@pytest.mark.parametrize(
    "query",
    [
        'userName eq "alice@contoso.com"',
        'externalId eq "0a21f0f2-8d2a"',
        'emails[type eq "work"].value eq "alice@contoso.com"',
        'userName eq "ALICE@CONTOSO.COM"',
        'userName sw "alice" and active eq true',
        'not (userName eq "carol@contoso.com")',
    ],
)
def test_filters_as_entra_and_okta_send_them_find_the_user(scim, query):
    scim.post("Users", entra_user())
    scim.post("Users", entra_user(name="carol@contoso.com", external_id="other"))
    found = scim.get("Users", filter=query).json_body
    assert found["totalResults"] == 1 and found["Resources"][0]["userName"] == "alice@contoso.com"


def test_a_filter_matching_nobody_is_an_empty_list(scim):
    scim.post("Users", entra_user())
    found = scim.get("Users", filter='userName eq "nobody@contoso.com"').json_body
    assert found["totalResults"] == 0 and found["Resources"] == []


def test_pages_follow_start_index_and_count(scim):
    for n in range(5):
        scim.post("Users", entra_user(name=f"u{n}@contoso.com", external_id=str(n)))
    page = scim.get("Users", startIndex=2, count=2).json_body
    assert page["totalResults"] == 5 and page["startIndex"] == 2 and page["itemsPerPage"] == 2
    assert [r["userName"] for r in page["Resources"]] == ["u1@contoso.com", "u2@contoso.com"]


def test_attributes_select_what_is_returned(scim):
    scim.post("Users", entra_user())
    listed = scim.get("Users", attributes="userName").json_body["Resources"][0]
    assert set(listed) <= {"schemas", "id", "userName"} and listed["userName"]


def test_put_replaces_the_user(scim):
    uid = scim.post("Users", entra_user()).json_body["id"]
    replaced = entra_user(name="alice.l@contoso.com") | {"name": {"givenName": "Alicia", "familyName": "L"}}
    answer = scim.put(f"Users/{uid}", replaced)
    assert answer.status_code == 200 and answer.json_body["userName"] == "alice.l@contoso.com"
    assert User.objects.get(username="alice.l@contoso.com").first_name == "Alicia"


def test_patch_as_entra_sends_it_deactivates_with_a_string_false(scim):
    """Entra ID: capitalised op, a path, the value a string (learn.microsoft.com, "Disable user")."""
    uid = scim.post("Users", entra_user()).json_body["id"]
    entra = {"schemas": [PATCH], "Operations": [{"op": "Replace", "path": "active", "value": "False"}]}
    answer = scim.patch(f"Users/{uid}", entra)
    assert answer.status_code == 200 and answer.json_body["active"] is False
    assert not User.objects.get(username="alice@contoso.com").is_active


def test_patch_as_entra_sends_attribute_updates(scim):
    uid = scim.post("Users", entra_user()).json_body["id"]
    entra = {
        "schemas": [PATCH],
        "Operations": [
            {"op": "Add", "path": 'emails[type eq "work"].value', "value": "alice.new@contoso.com"},
            {"op": "Replace", "path": "name.familyName", "value": "Pleasance"},
            {"op": "Replace", "path": f"{ENTERPRISE}:department", "value": "Sales"},
        ],
    }
    body = scim.patch(f"Users/{uid}", entra).json_body
    assert body["emails"][0]["value"] == "alice.new@contoso.com" and body[ENTERPRISE]["department"] == "Sales"
    user = User.objects.get(username="alice@contoso.com")
    assert (user.email, user.last_name) == ("alice.new@contoso.com", "Pleasance")


def test_patch_as_okta_sends_it_deactivates_and_reactivates(scim):
    """Okta: lower-case op, no path, the attributes in the value (developer.okta.com, SCIM 2.0)."""
    uid = scim.post("Users", entra_user()).json_body["id"]
    off = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": False}}]}
    assert scim.patch(f"Users/{uid}", off).json_body["active"] is False
    on = {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": True}}]}
    assert scim.patch(f"Users/{uid}", on).json_body["active"] is True
    assert User.objects.get(username="alice@contoso.com").is_active


def test_delete_deactivates_and_the_user_is_gone_from_scim(scim):
    uid = scim.post("Users", entra_user()).json_body["id"]
    assert scim.delete(f"Users/{uid}").status_code == 204
    assert scim.get(f"Users/{uid}").status_code == 404
    assert not User.objects.get(username="alice@contoso.com").is_active


def test_a_provider_sees_only_the_users_it_provisioned(scim, other_scim):
    uid = scim.post("Users", entra_user()).json_body["id"]
    assert other_scim.get(f"Users/{uid}").status_code == 404
    assert other_scim.get("Users").json_body["totalResults"] == 0
    assert (
        other_scim.patch(
            f"Users/{uid}",
            {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": False}}]},
        ).status_code
        == 404
    )
    assert other_scim.delete(f"Users/{uid}").status_code == 404
    assert User.objects.get(username="alice@contoso.com").is_active


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"schemas": [USER]}, "userName"),
        ({"schemas": [USER], "userName": "x" * 151}, "userName"),
        ({"schemas": [USER], "userName": "a", "emails": [{"value": "not-an-email"}]}, "emails"),
        ({"schemas": [USER], "userName": "a", "active": "sometimes"}, "active"),
    ],
)
def test_bad_input_is_a_400_scim_error_naming_the_attribute(scim, payload, field):
    answer = scim.post("Users", payload)
    assert answer.status_code == 400, answer.json_body
    assert answer.json_body["schemas"] == [ERROR] and answer.json_body["status"] == "400"
    assert field in answer.json_body["detail"]


def test_bad_json_a_bad_filter_and_a_bad_patch_are_400s(scim):
    response = scim.client.post("/scim/v2/Users", data="{nope", content_type="application/scim+json")
    assert response.status_code == 400 and b"invalidSyntax" in response.content
    bad_filter = scim.get("Users", filter="userName eq")
    assert bad_filter.status_code == 400 and bad_filter.json_body["scimType"] == "invalidFilter"
    uid = scim.post("Users", entra_user()).json_body["id"]
    bad_op = scim.patch(
        f"Users/{uid}", {"schemas": [PATCH], "Operations": [{"op": "frobnicate", "path": "x"}]}
    )
    assert bad_op.status_code == 400 and bad_op.json_body["schemas"] == [ERROR]
    assert scim.get("Users", startIndex="first").status_code == 400
    assert scim.get("Users/not-a-uuid").status_code == 404


def test_only_a_provider_token_opens_scim_not_a_personal_token_or_a_session(scim):
    person = UserFactory(username="it", is_superuser=True, is_staff=True)
    _, personal = accounts.create_api_token(user=person, name="laptop")
    assert Client(HTTP_AUTHORIZATION=f"Bearer {personal}").get("/scim/v2/Users").status_code == 401
    session = Client()
    session.force_login(person)
    assert session.get("/scim/v2/Users").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer kqs_wrong").get("/scim/v2/Users").status_code == 401
    assert scim.get("Users").status_code == 200


def test_discovery_endpoints_describe_users_and_groups(scim):
    config = scim.get("ServiceProviderConfig").json_body
    assert config["patch"]["supported"] is True and config["filter"]["supported"] is True
    types = {r["name"] for r in scim.get("ResourceTypes").json_body["Resources"]}
    assert types == {"User", "Group"}
    assert scim.get(f"Schemas/{USER}").json_body["id"] == USER
