"""Change requests through the services: who may ask, who decides (the owner of the envelope
above), approve as asked, approve with changes, deny, and the refusals that leave a request pending."""

from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from apps.accounts.models import Group, Membership, Notification
from apps.governance import selectors, services
from apps.governance.models import ChangeRequest
from apps.policies import services as policies
from apps.policies.models import ComputeResource, PolicyChange, Profile
from apps.policies.services import QuotaChanged
from tests.governance.conftest import ask, group, person, policy

pytestmark = pytest.mark.django_db

Role = Membership.Role
State = ChangeRequest.State
APPROVE, WITH_CHANGES, DENY = (
    services.Decision.APPROVE,
    services.Decision.APPROVE_WITH_CHANGES,
    services.Decision.DENY,
)


def routed(request: ChangeRequest):
    return request.approver_role, request.approver_group.slug if request.approver_group else None


def notes(username: str) -> list[Notification]:
    return list(Notification.objects.filter(user__username=username, kind=services.NOTIFICATION_KIND))


# Who decides: approver_role_and_group.


def test_a_teams_request_goes_to_the_heads_of_its_department(estate):
    assert routed(ask()) == (Role.DEPARTMENT_HEAD, "language")


def test_a_departments_request_goes_to_leadership_of_its_business_unit(estate):
    assert routed(ask("head-language", "language", reservation=Decimal("100"))) == (
        Role.LEADERSHIP,
        "research",
    )


def test_a_business_units_request_goes_to_it(estate):
    assert routed(ask("cio", "research", limit=Decimal("260"))) == (Role.IT_ADMIN, None)


def test_a_new_compute_resource_goes_to_it_whatever_the_level(estate):
    request = ask(kind=ChangeRequest.Kind.COMPUTE_RESOURCE, profile=Profile.objects.get(name="l40s-1"))
    assert routed(request) == (Role.IT_ADMIN, None)


def test_a_head_asking_for_a_team_below_them_does_not_decide_it_leadership_does(estate):
    assert routed(ask("head-language", "pretraining")) == (Role.LEADERSHIP, "research")


def test_a_team_without_a_department_above_goes_to_leadership(estate):
    lonely = Group.objects.create(
        name="Lonely", slug="lonely", kind=Group.Kind.TEAM, parent=group("research")
    )
    policies.create_policy(group=lonely, reservation=0, limit=4)
    Membership.objects.create(user=person("dev-alignment"), group=lonely, role=Role.TEAM_LEAD)
    assert routed(ask("dev-alignment", "lonely", reservation=Decimal("2"))) == (Role.LEADERSHIP, "research")


def test_the_approvers_are_the_holders_of_the_routed_role_over_the_group_never_the_requester(estate):
    assert {u.username for u in selectors.approvers(ask())} == {"head-language"}
    assert {
        u.username for u in selectors.approvers(ask("head-language", "language", limit=Decimal("210")))
    } == {"cio"}
    compute = ask(kind=ChangeRequest.Kind.COMPUTE_RESOURCE, profile=Profile.objects.get(name="l40s-1"))
    assert {u.username for u in selectors.approvers(compute)} == {"it"}


# Who may ask.


@pytest.mark.parametrize(
    "username, slug, allowed",
    [
        ("lead-pretraining", "pretraining", True),
        ("lead-pretraining", "alignment", False),
        ("lead-pretraining", "language", False),
        ("head-language", "language", True),
        ("head-language", "alignment", True),
        ("head-language", "research", False),
        ("head-language", "vision", False),
        ("cio", "research", True),
        ("dev-pretraining", "pretraining", False),
        ("finance", "pretraining", False),
        ("it", "pretraining", False),
    ],
)
def test_only_a_teams_lead_its_heads_or_leadership_for_a_business_unit_may_ask(
    estate, username, slug, allowed
):
    assert selectors.may_ask(person(username), group(slug)) is allowed
    if not allowed:
        with pytest.raises(PermissionDenied):
            ask(username, slug)


def test_filing_notifies_the_approvers_and_nobody_else(estate):
    ask()
    assert len(notes("head-language")) == 1
    assert "lead-pretraining asks for reservation 56" in notes("head-language")[0].message
    assert notes("cio") == [] and notes("it") == [] and notes("lead-pretraining") == []


@pytest.mark.parametrize(
    "values, field",
    [
        ({"justification": "  "}, "justification"),
        ({"reservation": None, "limit": None, "budget_hours": None}, "reservation"),
        ({"reservation": Decimal("-1")}, "reservation"),
        ({"reservation": Decimal("0.0001")}, "reservation"),
        ({"reservation": Decimal("170")}, "limit"),  # above the team's limit of 160
        ({"budget_hours": Decimal("-5")}, "budget_hours"),
        ({"kind": ChangeRequest.Kind.COMPUTE_RESOURCE}, "profile"),
    ],
)
def test_bad_values_are_refused_naming_the_field(estate, values, field):
    with pytest.raises(ValidationError) as refused:
        ask(**values)
    assert field in refused.value.message_dict
    assert ChangeRequest.objects.count() == 0


def test_budget_hours_for_a_policy_without_a_budget_need_a_period(estate):
    Membership.objects.create(user=person("lead-pretraining"), group=group("perception"), role=Role.TEAM_LEAD)
    with pytest.raises(ValidationError) as refused:
        ask(slug="perception", budget_hours=Decimal("100"))
    assert "budget_period" in refused.value.message_dict
    assert ask(slug="perception", budget_hours=Decimal("100"), budget_period="month").budget_period == "month"


# Deciding.


def test_approving_applies_exactly_the_asked_values_audited_with_notifications_both_sides(estate):
    request = ask(reservation=Decimal("56"), budget_hours=Decimal("26000"))
    head = person("head-language")
    services.decide(request, actor=head, decision=APPROVE, comment="Fine for this quarter.")
    request.refresh_from_db()
    pretraining = policy("pretraining")
    assert (pretraining.reservation, pretraining.budget_hours) == (Decimal("56"), Decimal("26000"))
    assert request.state == State.APPROVED and request.approver == head and request.decided_at
    assert request.applied_values == {"reservation": "56.000", "budget_hours": "26000.000"}
    change = request.applied_change
    assert change.policy == pretraining and change.actor == head and change.via == PolicyChange.Via.PORTAL
    assert change.changes == {"reservation": ["48.000", "56.000"], "budget_hours": ["24000.000", "26000.000"]}
    [told] = notes("lead-pretraining")
    assert "approved by head-language" in told.message and "Fine for this quarter." in told.message


def test_approving_with_changes_applies_the_approvers_values(estate):
    request = ask(reservation=Decimal("64"))
    services.decide(
        request, actor=person("head-language"), decision=WITH_CHANGES, values={"reservation": Decimal("52")}
    )
    request.refresh_from_db()
    assert policy("pretraining").reservation == Decimal("52")
    assert request.state == State.APPROVED_WITH_CHANGES
    assert request.applied_values == {"reservation": "52.000"}
    assert request.applied_change.changes == {"reservation": ["48.000", "52.000"]}


def test_approving_with_changes_needs_values(estate):
    request = ask()
    with pytest.raises(ValidationError) as refused:
        services.decide(request, actor=person("head-language"), decision=WITH_CHANGES, values={})
    assert "values" in refused.value.message_dict


def test_denying_needs_a_comment_and_changes_no_policy(estate):
    request = ask()
    head = person("head-language")
    with pytest.raises(ValidationError) as refused:
        services.decide(request, actor=head, decision=DENY, comment=" ")
    assert "comment" in refused.value.message_dict
    request.refresh_from_db()
    assert request.state == State.PENDING
    audited = PolicyChange.objects.count()
    services.decide(request, actor=head, decision=DENY, comment="Use the spare capacity at night.")
    request.refresh_from_db()
    assert request.state == State.DENIED and request.decision_comment == "Use the spare capacity at night."
    assert policy("pretraining").reservation == Decimal("48") and PolicyChange.objects.count() == audited
    assert "denied by head-language" in notes("lead-pretraining")[0].message


def test_a_request_that_no_longer_fits_is_refused_with_the_reason_and_stays_pending(estate):
    """Pretraining asks 56 (48 + 24 + 8 = 80, Language's reservation); Alignment then grows to 32."""
    request = ask(reservation=Decimal("56"))
    policies.update_policy(policy("alignment"), reservation=Decimal("32"))
    audited = PolicyChange.objects.count()
    with pytest.raises(ValidationError) as refused:
        services.decide(request, actor=person("head-language"), decision=APPROVE)
    assert "above its reservation (80)" in " ".join(refused.value.message_dict["reservation"])
    request.refresh_from_db()
    assert request.state == State.PENDING and request.approver is None and request.applied_values == {}
    assert policy("pretraining").reservation == Decimal("48") and PolicyChange.objects.count() == audited
    assert notes("lead-pretraining") == []


def test_a_stale_version_refuses_the_approval_like_any_stale_form(estate):
    request = ask(reservation=Decimal("50"))
    seen = policy("pretraining").version
    policies.update_policy(policy("pretraining"), limit=Decimal("150"))
    with pytest.raises(QuotaChanged):
        services.decide(request, actor=person("head-language"), decision=APPROVE, version=seen)
    request.refresh_from_db()
    assert request.state == State.PENDING and policy("pretraining").reservation == Decimal("48")


def test_a_request_is_decided_once(estate):
    request = ask()
    services.decide(request, actor=person("head-language"), decision=APPROVE)
    with pytest.raises(ValidationError) as refused:
        services.decide(request, actor=person("head-language"), decision=DENY, comment="no")
    assert "approved already" in refused.value.message_dict["decision"][0]


@pytest.mark.parametrize("username", ["lead-pretraining", "it", "cio", "finance", "dev-pretraining"])
def test_only_the_owner_of_the_envelope_above_decides(estate, username):
    request = ask()
    with pytest.raises(PermissionDenied):
        services.decide(request, actor=person(username), decision=APPROVE)
    request.refresh_from_db()
    assert request.state == State.PENDING


def test_leadership_decides_a_departments_request(estate):
    request = ask("head-language", "language", limit=Decimal("220"))
    with pytest.raises(PermissionDenied):
        services.decide(request, actor=person("it"), decision=APPROVE)
    services.decide(request, actor=person("cio"), decision=APPROVE)
    assert policy("language").limit == Decimal("220")
    assert "approved by cio" in notes("head-language")[0].message


def test_it_approves_a_new_compute_resource_which_is_connected_and_audited(estate):
    request = ask(kind=ChangeRequest.Kind.COMPUTE_RESOURCE, profile=Profile.objects.get(name="l40s-1"))
    assert request.name == "pretraining/l40s-1"
    with pytest.raises(PermissionDenied):
        services.decide(request, actor=person("head-language"), decision=APPROVE)
    with pytest.raises(ValidationError):
        services.decide(request, actor=person("it"), decision=WITH_CHANGES, values={"limit": Decimal("1")})
    services.decide(request, actor=person("it"), decision=APPROVE)
    request.refresh_from_db()
    resource = ComputeResource.objects.get(name="pretraining/l40s-1")
    assert resource.policy == policy("pretraining") and request.compute_resource == resource
    assert request.applied_change.changes == {"compute_resource": [None, "pretraining/l40s-1"]}


def test_a_compute_resource_already_connected_is_refused_when_filed(estate):
    with pytest.raises(ValidationError) as refused:
        ask(kind=ChangeRequest.Kind.COMPUTE_RESOURCE, profile=Profile.objects.get(name="h100-8"))
    assert "profile" in refused.value.message_dict


def test_the_requester_withdraws_a_pending_request_and_no_one_else_may(estate):
    request = ask()
    with pytest.raises(PermissionDenied):
        services.withdraw(request, actor=person("head-language"))
    services.withdraw(request, actor=person("lead-pretraining"))
    request.refresh_from_db()
    assert request.state == State.WITHDRAWN
    with pytest.raises(ValidationError):
        services.decide(request, actor=person("head-language"), decision=APPROVE)


def test_each_person_sees_their_own_requests_and_those_they_decide(estate):
    team, department = ask(), ask("head-language", "language", limit=Decimal("210"))
    assert set(selectors.visible_requests(person("lead-pretraining"))) == {team}
    assert set(selectors.visible_requests(person("head-language"))) == {team, department}
    assert set(selectors.requests_to_decide(person("head-language"))) == {team}
    assert set(selectors.requests_to_decide(person("cio"))) == {department}
    for username in ("it", "finance", "dev-pretraining", "dev-alignment"):
        assert set(selectors.visible_requests(person(username))) == set(), username


def test_a_decision_goes_to_the_groups_webhooks(estate):
    from apps.webhooks.models import Webhook, WebhookDelivery

    hook = Webhook.objects.create(
        group=group("language"), url="https://hooks.example.test/language", kinds=["change_request"]
    )
    request = ask()
    assert not WebhookDelivery.objects.filter(webhook=hook).exists()
    services.decide(request, actor=person("head-language"), decision=APPROVE)
    delivery = WebhookDelivery.objects.get(webhook=hook)
    assert delivery.kind == "change_request" and "approved" in str(delivery.payload)
