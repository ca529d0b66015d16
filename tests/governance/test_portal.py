"""Change requests in the portal and the admin: every new URL for every demo role (the owner
succeeds, every other role is refused), filing from the team page, deciding from the requests
page, and a refusal that leaves the request pending."""

from decimal import Decimal

import pytest
from django.test import Client

from apps.governance.models import ChangeRequest
from tests.governance.conftest import ask, person, policy

pytestmark = pytest.mark.django_db

ROLES = ["it", "cio", "finance", "head-language", "lead-pretraining", "dev-pretraining", "dev-alignment"]


def browser(username: str | None) -> Client:
    client = Client()
    if username:
        client.force_login(person(username))
    return client


def matrix(pk: int) -> dict:
    """ "METHOD url" -> (allowed roles, their answer, everyone else's). The request is
    Pretraining's, filed by its lead; Language's head decides it."""
    filing = {"kind": "quota", "reservation": "56", "justification": "More GPUs."}
    return {
        ("GET", "/requests/"): (set(ROLES), 200, None, {}),
        ("GET", "/requests/new/pretraining/"): ({"lead-pretraining", "head-language"}, 200, 403, {}),
        ("POST", "/requests/new/pretraining/"): ({"lead-pretraining", "head-language"}, 302, 403, filing),
        ("GET", "/requests/new/language/"): ({"head-language"}, 200, 403, {}),
        ("GET", "/requests/new/research/"): ({"cio"}, 200, 403, {}),
        ("GET", f"/requests/{pk}/"): ({"lead-pretraining", "head-language"}, 200, 404, {}),
        ("POST", f"/requests/{pk}/decide/"): ({"head-language"}, 302, 403, {"decision": "approve"}),
        ("POST", f"/requests/{pk}/withdraw/"): ({"lead-pretraining"}, 302, 403, {}),
    }


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_the_allowed_or_the_refused_answer(estate, role):
    from django.db import transaction

    request = ask()
    client = browser(role)
    wrong = {}
    for (method, url), (allowed, ok, refused, body) in matrix(request.pk).items():
        with transaction.atomic():
            answer = client.post(url, body) if method == "POST" else client.get(url)
            transaction.set_rollback(True)
        expected = ok if role in allowed else refused
        if answer.status_code != expected:
            wrong[f"{method} {url}"] = f"{answer.status_code}, expected {expected}"
    assert wrong == {}


def test_every_url_sends_an_anonymous_visitor_to_the_login_page(estate):
    request = ask()
    for method, url in matrix(request.pk):
        answer = browser(None).post(url, {}) if method == "POST" else browser(None).get(url)
        assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/"), url


def test_the_team_page_links_to_the_request_form_for_who_may_ask_only(estate):
    assert (
        "/requests/new/pretraining/"
        in browser("lead-pretraining").get("/teams/pretraining/").content.decode()
    )
    assert "/requests/new/pretraining/" not in browser("it").get("/teams/pretraining/").content.decode()
    assert (
        "/requests/new/language/" in browser("head-language").get("/departments/language/").content.decode()
    )


def test_a_lead_files_and_the_head_approves_through_the_forms(estate):
    lead, head = browser("lead-pretraining"), browser("head-language")
    answer = lead.post(
        "/requests/new/pretraining/", {"kind": "quota", "reservation": "56", "justification": "A 70B run."}
    )
    assert answer.status_code == 302
    request = ChangeRequest.objects.get()
    page = head.get("/requests/").content.decode()
    assert f"/requests/{request.pk}/" in page and "Waiting for your decision" in page
    detail = head.get(f"/requests/{request.pk}/").content.decode()
    assert 'id="decide-form"' in detail
    version = policy("pretraining").version
    answer = head.post(f"/requests/{request.pk}/decide/", {"decision": "approve", "version": version})
    assert answer.status_code == 302
    assert policy("pretraining").reservation == Decimal("56")
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.APPROVED


def test_a_bad_filing_shows_the_form_again_naming_the_field(estate):
    answer = browser("lead-pretraining").post(
        "/requests/new/pretraining/", {"kind": "quota", "reservation": "-1", "justification": ""}
    )
    assert answer.status_code == 400
    assert set(answer.context["form"].errors) >= {"reservation", "justification"}
    answer = browser("lead-pretraining").post(
        "/requests/new/pretraining/", {"kind": "quota", "reservation": "170", "justification": "x"}
    )
    assert answer.status_code == 400 and "limit" in answer.context["form"].errors
    assert ChangeRequest.objects.count() == 0


def test_an_approval_that_no_longer_fits_is_a_form_error_and_stays_pending(estate):
    from apps.policies import services as policies

    request = ask(reservation=Decimal("56"))
    policies.update_policy(policy("alignment"), reservation=Decimal("32"))
    answer = browser("head-language").post(f"/requests/{request.pk}/decide/", {"decision": "approve"})
    assert answer.status_code == 400
    assert "above its reservation (80)" in " ".join(answer.context["form"].errors["reservation"])
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.PENDING


def test_a_stale_decision_form_is_a_409_with_the_current_values(estate):
    from apps.policies import services as policies

    request = ask(reservation=Decimal("50"))
    seen = policy("pretraining").version
    policies.update_policy(policy("pretraining"), limit=Decimal("150"))
    answer = browser("head-language").post(
        f"/requests/{request.pk}/decide/", {"decision": "approve", "version": seen}
    )
    assert answer.status_code == 409 and "changed by someone else" in answer.content.decode()
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.PENDING


def test_deny_without_a_comment_is_a_form_error(estate):
    request = ask()
    answer = browser("head-language").post(f"/requests/{request.pk}/decide/", {"decision": "deny"})
    assert answer.status_code == 400 and "comment" in answer.context["form"].errors


# The admin.


def admin_client() -> Client:
    user = person("it")
    user.is_staff = user.is_superuser = True
    user.save()
    return browser("it")


def test_the_admin_lists_requests_with_filters_and_cannot_add_or_edit_them(estate):
    request = ask()
    client = admin_client()
    page = client.get("/admin/governance/changerequest/?state__exact=pending&kind__exact=quota")
    assert page.status_code == 200 and "Pretraining" in page.content.decode()
    assert client.get("/admin/governance/changerequest/add/").status_code == 403
    client.post(
        f"/admin/governance/changerequest/{request.pk}/change/", {"decision": "", "state": "approved"}
    )
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.PENDING


def test_the_admin_decides_only_through_the_service(estate):
    """IT owns a new compute resource's request; a team's request is the head's, so IT's decision
    on it is refused on the form and the request stays pending."""
    from apps.policies.models import ComputeResource, PolicyChange, Profile

    client = admin_client()
    team = ask()
    answer = client.post(f"/admin/governance/changerequest/{team.pk}/change/", {"decision": "approve"})
    assert answer.status_code == 200 and "may not decide" in answer.content.decode()
    team.refresh_from_db()
    assert team.state == ChangeRequest.State.PENDING
    compute = ask(kind=ChangeRequest.Kind.COMPUTE_RESOURCE, profile=Profile.objects.get(name="l40s-1"))
    answer = client.post(f"/admin/governance/changerequest/{compute.pk}/change/", {"decision": "approve"})
    assert answer.status_code == 302
    compute.refresh_from_db()
    assert (
        compute.state == ChangeRequest.State.APPROVED and compute.applied_change.via == PolicyChange.Via.ADMIN
    )
    assert ComputeResource.objects.filter(name="pretraining/l40s-1").exists()


def test_the_admin_action_approves_as_asked_through_the_service(estate):
    from apps.policies.models import Profile

    compute = ask(kind=ChangeRequest.Kind.COMPUTE_RESOURCE, profile=Profile.objects.get(name="l40s-1"))
    team = ask()
    admin_client().post(
        "/admin/governance/changerequest/",
        {"action": "approve_as_asked", "_selected_action": [compute.pk, team.pk]},
    )
    compute.refresh_from_db()
    team.refresh_from_db()
    assert compute.state == ChangeRequest.State.APPROVED
    assert team.state == ChangeRequest.State.PENDING  # the head's to decide, not IT's
