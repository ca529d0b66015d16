"""Dated quota loans (issue 35, rule 4) through ``apps.policies.loans`` and the change-request
flow, on the demo estate: Language (reservation 80, limit 200, 40000 h a month) splits into
Pretraining (48, 160, 24000 h) and Alignment (24, 64, 8000 h)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from apps.governance import services
from apps.governance.models import ChangeRequest
from apps.policies import loans
from apps.policies.models import PolicyChange, QuotaLoan
from tests.governance.conftest import group, person, policy

pytestmark = pytest.mark.django_db

D = Decimal


EIGHT = D("8")


def lend(what="reservation", amount=EIGHT, days=7, actor="head-language", **kw):
    return loans.lend(
        policy("pretraining"),
        policy("alignment"),
        what=what,
        amount=amount,
        until=timezone.now() + timedelta(days=days),
        actor=person(actor),
        **kw,
    )


def quota(slug):
    p = policy(slug)
    return p.reservation, p.limit, p.budget_hours


def test_a_loan_moves_the_quantity_at_once_and_is_audited_on_both_sides(estate):
    loan = lend()
    assert quota("pretraining")[0] == D("40") and quota("alignment")[0] == D("32")
    assert loan.state == QuotaLoan.State.ACTIVE
    trail = PolicyChange.objects.filter(via=PolicyChange.Via.LOAN)
    assert {c.policy.group.slug: c.changes["reservation"] for c in trail} == {
        "pretraining": ["48.000", "40.000"],
        "alignment": ["24.000", "32.000"],
    }


def test_a_loan_is_given_back_when_its_date_has_passed_even_long_after(estate):
    loan = lend(days=1)
    assert loans.end_due(timezone.now()) == []
    ended = loans.end_due(timezone.now() + timedelta(days=30))  # the engine was down for weeks
    assert [e.pk for e in ended] == [loan.pk]
    assert quota("pretraining")[0] == D("48") and quota("alignment")[0] == D("24")
    loan.refresh_from_db()
    assert loan.state == QuotaLoan.State.ENDED and loan.ended_by is None
    assert PolicyChange.objects.filter(via=PolicyChange.Via.LOAN).count() == 4
    assert loans.end_due(timezone.now() + timedelta(days=31)) == []  # given back once


def test_budget_hours_are_lent_from_the_window_of_their_period(estate):
    lend(what="budget_hours", amount=D("1000"))
    assert quota("pretraining")[2] == D("23000") and quota("alignment")[2] == D("9000")


def test_a_loan_that_breaks_the_borrowers_limit_is_refused_whole_naming_the_side(estate):
    with pytest.raises(ValidationError) as refused:
        lend(amount=D("45"))  # Alignment's reservation would be 69, above its limit of 64
    assert "At the start: Alignment" in str(refused.value.message_dict["amount"])
    assert quota("pretraining")[0] == D("48") and not QuotaLoan.objects.exists()


def test_a_loan_is_refused_when_an_earlier_loans_end_would_then_break_a_rule(estate):
    lend(days=1)  # Alignment holds 32 until tomorrow, 8 of them Pretraining's
    with pytest.raises(ValidationError) as refused:
        loans.lend(
            policy("alignment"),
            policy("pretraining"),
            what="reservation",
            amount=D("30"),
            until=timezone.now() + timedelta(days=7),
            actor=person("head-language"),
        )  # fits now (Alignment 2), but tomorrow Alignment could not give the 8 back
    message = str(refused.value.message_dict["amount"])
    assert "When the loan of 8 GPUs of reservation from Pretraining to Alignment" in message
    assert quota("alignment")[0] == D("32") and QuotaLoan.objects.count() == 1


def test_a_give_back_refused_keeps_the_loan_with_its_reason_and_is_retried(estate):
    loan = lend(days=1)
    alignment = policy("alignment")
    alignment.lendable = D("30")  # IT keeps 30 of its (borrowed) 32 for itself: the give-back
    alignment.save()  # to 24 would leave lendable above the reservation
    assert loans.end_due(timezone.now() + timedelta(days=2)) == []
    loan.refresh_from_db()
    assert loan.state == QuotaLoan.State.ACTIVE and "Lendable" in loan.revert_error
    assert quota("alignment")[0] == D("32")
    alignment.refresh_from_db()
    alignment.lendable = None
    alignment.save()
    assert [e.pk for e in loans.end_due(timezone.now() + timedelta(days=2))] == [loan.pk]
    loan.refresh_from_db()
    assert loan.state == QuotaLoan.State.ENDED and loan.revert_error == ""


def test_a_loan_ended_early_goes_back_at_once_and_names_who_ended_it(estate):
    loan = loans.give_back(lend(), actor=person("head-language"))
    assert loan.state == QuotaLoan.State.ENDED and loan.ended_by.username == "head-language"
    assert quota("alignment")[0] == D("24")
    with pytest.raises(ValidationError):
        loans.give_back(loan)


def loan_request(**values):
    values.setdefault("loan_until", timezone.now() + timedelta(days=3))
    return services.file_request(
        requester=person("lead-pretraining"),
        group=group("pretraining"),
        kind=ChangeRequest.Kind.LOAN,
        justification="Deadline on Friday.",
        **values,
    )


def test_a_team_lead_asks_for_a_loan_and_the_department_head_approves_it(estate):
    with pytest.raises(PermissionDenied):
        lend(actor="lead-pretraining")
    request = loan_request(lender=group("alignment"), reservation=D("8"))
    assert (request.approver_role, request.approver_group.slug) == ("department_head", "language")
    decided = services.decide(request, actor=person("head-language"), decision=services.Decision.APPROVE)
    assert decided.applied_loan.via == QuotaLoan.Via.REQUEST
    assert quota("pretraining")[0] == D("56") and quota("alignment")[0] == D("16")


def test_a_loan_request_is_approved_as_asked_or_denied_not_changed(estate):
    request = loan_request(lender=group("alignment"), limit=D("1"))
    with pytest.raises(ValidationError) as refused:
        services.decide(
            request,
            actor=person("head-language"),
            decision=services.Decision.APPROVE_WITH_CHANGES,
            values={"limit": D("2")},
        )
    assert "A loan is approved as asked" in str(refused.value)


def test_a_loan_request_names_one_quantity_and_a_lender(estate):
    with pytest.raises(ValidationError) as refused:
        loan_request(reservation=D("8"))
    assert "lender" in refused.value.message_dict
    with pytest.raises(ValidationError) as refused:
        loan_request(lender=group("alignment"), reservation=D("8"), limit=D("8"))
    assert "reservation" in refused.value.message_dict


def test_bad_values_are_refused_by_field(estate):
    for kw, field in (
        ({"amount": D("0")}, "amount"),
        ({"amount": "x"}, "amount"),
        ({"what": "gpus"}, "what"),
        ({"days": -1}, "until"),
    ):
        with pytest.raises(ValidationError) as refused:
            lend(**kw)
        assert field in refused.value.message_dict


def api(username):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(person(username))
    return client


def test_the_api_lends_for_the_department_head_and_refuses_a_team_lead(estate):
    body = {
        "lender": "pretraining",
        "borrower": "alignment",
        "what": "limit",
        "amount": "8",
        "until": (timezone.now() + timedelta(days=2)).isoformat(),
        "note": "paper deadline",
    }
    assert api("lead-pretraining").post("/api/v1/loans/", body, format="json").status_code == 403
    bad = api("head-language").post("/api/v1/loans/", {**body, "amount": "-1"}, format="json")
    assert bad.status_code == 400 and "amount" in bad.json()
    made = api("head-language").post("/api/v1/loans/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["text"] == "8 GPUs of limit" and made.json()["via"] == "api"
    seen = api("lead-pretraining").get("/api/v1/loans/").json()
    rows = seen["results"] if isinstance(seen, dict) else seen
    assert [row["id"] for row in rows] == [made.json()["id"]]
    assert api("lead-pretraining").post(f"/api/v1/loans/{made.json()['id']}/give-back/").status_code == 403
    back = api("head-language").post(f"/api/v1/loans/{made.json()['id']}/give-back/")
    assert back.status_code == 200 and back.json()["state"] == "ended"


def test_both_groups_pages_show_the_loan_with_its_date(estate, client):
    loan = lend(note="paper deadline")
    client.force_login(person("head-language"))
    for path in ("/teams/alignment/", "/teams/pretraining/", "/departments/language/"):
        page = client.get(path)
        assert page.status_code == 200, path
        text = page.content.decode()
        assert f'data-loan="{loan.pk}"' in text and f"{loan.ends_at:%Y-%m-%d %H:%M} UTC" in text


def test_a_department_head_lends_on_the_portal_and_a_refusal_shows_its_reason(estate, client):
    until = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%d %H:%M")
    form = {
        "lender": group("pretraining").pk,
        "borrower": group("alignment").pk,
        "what": "reservation",
        "amount": "45",
        "until": until,
        "note": "paper deadline",
    }
    client.force_login(person("lead-pretraining"))
    assert client.get("/departments/language/lend/").status_code == 403
    client.force_login(person("head-language"))
    refused = client.post("/departments/language/lend/", form)
    assert refused.status_code == 400 and "At the start: Alignment" in refused.content.decode()
    done = client.post("/departments/language/lend/", {**form, "amount": "8"})
    assert done.status_code == 302 and QuotaLoan.objects.get().via == QuotaLoan.Via.PORTAL


def test_a_team_lead_files_a_loan_request_on_the_portal(estate, client):
    client.force_login(person("lead-pretraining"))
    until = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%d %H:%M")
    response = client.post(
        "/requests/new/pretraining/",
        {
            "kind": "loan",
            "lender": group("alignment").pk,
            "reservation": "8",
            "loan_until": until,
            "justification": "paper deadline",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    request = ChangeRequest.objects.get()
    assert (request.kind, request.lender.slug, request.reservation) == ("loan", "alignment", D("8"))
