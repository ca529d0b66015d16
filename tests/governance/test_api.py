"""Change requests over the API: a person lists and reads their own requests and those they
decide (others are not found), files one for a group they may ask for (403 otherwise), and the
owner of the envelope above decides it; bad input is a 400 naming the field."""

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from apps.governance.models import ChangeRequest
from apps.policies.models import PolicyChange
from tests.governance.conftest import ask, person, policy

pytestmark = pytest.mark.django_db

URL = "/api/v1/change-requests/"
OTHERS = ["it", "cio", "finance", "dev-pretraining", "dev-alignment"]


def api(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(person(username))
    return client


def test_a_team_lead_files_a_request_and_the_head_approves_it(estate):
    filed = api("lead-pretraining").post(
        URL, {"group": "pretraining", "reservation": "56", "justification": "A 70B run."}, format="json"
    )
    assert filed.status_code == 201, filed.json()
    body = filed.json()
    assert body["state"] == "pending" and body["approver_role"] == "department_head"
    assert body["approver_group"] == "language" and body["reservation"] == "56.000"
    pk = body["id"]
    assert [r["id"] for r in api("head-language").get(URL).json()["results"]] == [pk]
    decided = api("head-language").post(f"{URL}{pk}/decide/", {"decision": "approve"}, format="json")
    assert decided.status_code == 200, decided.json()
    assert decided.json()["state"] == "approved" and decided.json()["applied_values"] == {
        "reservation": "56.000"
    }
    assert policy("pretraining").reservation == Decimal("56")


def test_approve_with_changes_takes_the_values(estate):
    request = ask(reservation=Decimal("64"))
    answer = api("head-language").post(
        f"{URL}{request.pk}/decide/",
        {"decision": "approve_with_changes", "values": {"reservation": "52"}, "comment": "52 for now."},
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    assert answer.json()["state"] == "approved_with_changes"
    assert policy("pretraining").reservation == Decimal("52")


@pytest.mark.parametrize("username", OTHERS)
def test_others_neither_see_nor_decide_a_request(estate, username):
    request = ask()
    client = api(username)
    assert client.get(URL).json()["results"] == []
    assert client.get(f"{URL}{request.pk}/").status_code == 404
    assert (
        client.post(f"{URL}{request.pk}/decide/", {"decision": "approve"}, format="json").status_code == 404
    )
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.PENDING


def test_the_requester_sees_but_may_not_decide_their_own_request(estate):
    request = ask()
    client = api("lead-pretraining")
    assert client.get(f"{URL}{request.pk}/").status_code == 200
    assert (
        client.post(f"{URL}{request.pk}/decide/", {"decision": "approve"}, format="json").status_code == 403
    )


@pytest.mark.parametrize("username", ["it", "finance", "dev-pretraining", "dev-alignment", "cio"])
def test_only_who_may_ask_files_a_request(estate, username):
    answer = api(username).post(
        URL, {"group": "pretraining", "reservation": "56", "justification": "Please."}, format="json"
    )
    assert answer.status_code == 403
    assert ChangeRequest.objects.count() == 0


def test_anonymous_callers_are_refused(estate):
    request = ask()
    assert APIClient().get(URL).status_code in (401, 403)
    assert APIClient().post(
        f"{URL}{request.pk}/decide/", {"decision": "approve"}, format="json"
    ).status_code in (
        401,
        403,
    )


@pytest.mark.parametrize(
    "body, field",
    [
        ({"group": "pretraining", "reservation": "56"}, "justification"),
        ({"group": "nowhere", "reservation": "56", "justification": "x"}, "group"),
        ({"group": "pretraining", "reservation": "-1", "justification": "x"}, "reservation"),
        ({"group": "pretraining", "reservation": "1e3", "justification": "x"}, "reservation"),
        ({"group": "pretraining", "justification": "x"}, "reservation"),
        ({"group": "pretraining", "reservation": "170", "justification": "x"}, "limit"),
        ({"group": "pretraining", "kind": "party", "justification": "x"}, "kind"),
        ({"group": "pretraining", "kind": "compute_resource", "justification": "x"}, "profile"),
        (
            {"group": "pretraining", "kind": "compute_resource", "profile": "nope", "justification": "x"},
            "profile",
        ),
        (
            {"group": "pretraining", "budget_hours": "5", "budget_period": "year", "justification": "x"},
            "budget_period",
        ),
    ],
)
def test_bad_input_when_filing_is_a_400_naming_the_field(estate, body, field):
    answer = api("lead-pretraining").post(URL, body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.json()


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "decision"),
        ({"decision": "maybe"}, "decision"),
        ({"decision": "deny"}, "comment"),
        ({"decision": "approve_with_changes"}, "values"),
        ({"decision": "approve_with_changes", "values": {"reservation": "x"}}, "values"),
        ({"decision": "approve", "version": "1"}, "version"),
    ],
)
def test_bad_input_when_deciding_is_a_400_naming_the_field(estate, body, field):
    request = ask()
    answer = api("head-language").post(f"{URL}{request.pk}/decide/", body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.json()
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.PENDING


def test_an_approval_that_no_longer_fits_is_a_400_with_the_reason_and_the_request_stays_pending(estate):
    from apps.policies import services as policies

    request = ask(reservation=Decimal("56"))
    policies.update_policy(policy("alignment"), reservation=Decimal("32"))
    audited = PolicyChange.objects.count()
    answer = api("head-language").post(f"{URL}{request.pk}/decide/", {"decision": "approve"}, format="json")
    assert answer.status_code == 400
    assert "above its reservation (80)" in answer.json()["reservation"][0]
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.PENDING and PolicyChange.objects.count() == audited


def test_a_stale_version_is_a_409(estate):
    request = ask(reservation=Decimal("50"))
    seen = policy("pretraining").version
    from apps.policies import services as policies

    policies.update_policy(policy("pretraining"), limit=Decimal("150"))
    answer = api("head-language").post(
        f"{URL}{request.pk}/decide/", {"decision": "approve", "version": seen}, format="json"
    )
    assert answer.status_code == 409 and "changed by someone else" in answer.json()["detail"]


def test_the_list_filters_by_state_and_refuses_an_unknown_state(estate):
    ask()
    client = api("lead-pretraining")
    assert len(client.get(URL, {"state": "pending"}).json()["results"]) == 1
    assert client.get(URL, {"state": "approved"}).json()["results"] == []
    answer = client.get(URL, {"state": "nonsense"})
    assert answer.status_code == 400 and "state" in answer.json()
