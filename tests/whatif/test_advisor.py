"""The quota advisor on a recorded period (docs/whatif.md, "Quota advisor"): tests/whatif's
borrowing estate recorded on the database; the figures measured from its usage intervals and
guarantees, the proposal, its proof (a what-if run of the same period under it) and its
acceptance as a change request."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from apps.accounts.models import Group, Membership
from apps.governance import services as governance
from apps.governance.models import ChangeRequest
from apps.ledger.models import UsageInterval
from apps.policies.models import ResourcePolicy
from apps.tasks.models import TaskEvent
from apps.whatif import advisor, runs
from apps.whatif.models import AdvisorProposal
from tests.factories import MembershipFactory, UserFactory
from tests.whatif.recorded import END, START


@pytest.fixture
def proposal(recorded, it):
    # the replay has no workers: each run's worker starts it a second after its placement
    for interval in UsageInterval.objects.all():
        at = interval.start + timedelta(seconds=1)
        TaskEvent.objects.create(task_id=interval.task_id, at=at, kind=TaskEvent.Kind.STARTED)
    # vision's guarantee: 60 s; its work waited 90 s for agents' borrowed GPUs
    ResourcePolicy.objects.filter(group__slug="vision").update(guarantee_start_s=60)
    return advisor.propose(it, START, END)


def _head(role, slug="vision", username="dana"):
    user = UserFactory(username=username)
    MembershipFactory(group=Group.objects.get(slug=slug), role=role, user=user)
    return user


def test_advisor_measures_the_recorded_period_and_reserves_the_peak_of_work_that_waited(proposal):
    rows = {row["group"]: row for row in proposal.groups}
    assert rows["vision"]["measured"] == {
        "gpu_hours": "0.027778",  # 2 GPUs x 50 s
        "borrowed_gpu_hours": "0.027778",
        "idle_reserved_gpu_hours": "0.000000",
        "peak_gpus": "2.000",
        "p95_gpus": "2.000",
        "start_p95_s": 91.0,
        "reserved_start_p95_s": None,
        "guarantee_start_s": 60,
        "budget_peak_hours": None,
    }
    assert rows["vision"]["current"] == {
        "reservation": "0.000",
        "limit": "4.000",
        "budget_hours": None,
        "budget_period": "",
    }
    # the guarantee goal reserves its peak (2); the limit, 2 x 1.25 rounded up, stays at 4
    assert rows["vision"]["proposed"] == {
        "reservation": "2.000",
        "limit": "4.000",
        "budget_hours": None,
        "budget_period": "",
    }
    # agents: 4 GPUs for 100 of 1,000 s: nothing reserved idles at most 20 %; its limit is the pool's
    assert rows["agents"]["measured"]["gpu_hours"] == "0.111111"
    assert rows["agents"]["proposed"]["reservation"] == "0.000"
    assert rows["agents"]["proposed"]["limit"] == "4.000" and not rows["agents"]["changed"]
    assert proposal.run.changes == {"reservations": {"vision": 2}}


def test_proof_is_the_whatif_replay_of_the_same_period_under_the_proposal(proposal):
    run = proposal.run
    assert (run.start, run.end, run.groups) == (START, END, [])
    runs.execute(run.pk)
    run.refresh_from_db()
    assert run.state == "done", run.error
    base, changed = run.report["base"]["groups"], run.report["changed"]["groups"]
    assert (base["vision"]["wait_median_s"], base["vision"]["wait_p95_s"]) == (90, 90)
    assert (changed["vision"]["wait_median_s"], changed["vision"]["wait_p95_s"]) == (0, 0)
    assert (changed["agents"]["wait_median_s"], changed["agents"]["wait_p95_s"]) == (25, 50)


def test_accept_files_a_change_request_with_the_proposal_and_its_proof(proposal):
    head = _head(Membership.Role.DEPARTMENT_HEAD)
    request = advisor.accept(proposal, head, "vision")
    assert (request.kind, request.state, request.requester) == ("quota", "pending", head)
    assert (request.reservation, request.limit, request.budget_hours) == (Decimal(2), None, None)
    assert f"what-if run {proposal.run_id}" in request.justification
    assert AdvisorProposal.objects.get(pk=proposal.pk).accepted == {"vision": request.pk}
    with pytest.raises(ValidationError):  # once while pending
        advisor.accept(proposal, head, "vision")
    # the approver applies it as any change request
    approver = _head(Membership.Role.IT_ADMIN, username="ivo")
    governance.decide(request, actor=approver, decision=governance.Decision.APPROVE)
    policy = ResourcePolicy.objects.get(group__slug="vision")
    assert (policy.reservation, policy.limit) == (Decimal(2), Decimal(4))


def test_accept_edited_figures_first_files_those(proposal):
    leader = _head(Membership.Role.LEADERSHIP)
    request = advisor.accept(proposal, leader, "vision", {"reservation": "1", "limit": "3"})
    assert (request.reservation, request.limit) == (Decimal(1), Decimal(3))


def test_accept_rbac_team_leads_and_strangers_are_refused(proposal):
    for role in (Membership.Role.TEAM_LEAD, Membership.Role.MEMBER):
        with pytest.raises(PermissionDenied):
            advisor.accept(proposal, _head(role, username=f"u-{role}"), "vision")
    outsider = _head(Membership.Role.DEPARTMENT_HEAD, slug="agents", username="other")
    with pytest.raises(PermissionDenied):
        advisor.accept(proposal, outsider, "vision")
    assert advisor.rows_for(proposal, outsider) == [r for r in proposal.groups if r["group"] == "agents"]
    assert ChangeRequest.objects.count() == 0


def test_accept_refuses_a_proposal_that_changes_nothing(proposal):
    with pytest.raises(ValidationError):
        advisor.accept(proposal, _head(Membership.Role.LEADERSHIP, slug="agents"), "agents")


def test_reserved_work_p95_matches_the_measured_guarantees(proposal):
    """The advisor sums what a group held in one sweep; the figures are guarantee_selectors'."""
    from apps.tasks.guarantee_selectors import guarantees_of

    ResourcePolicy.objects.filter(group__slug="agents").update(reservation=3)
    policies = list(ResourcePolicy.objects.all())
    figures = {f.name: f for f in advisor.measure(START, END)[0]}
    measured = guarantees_of(policies, START, END)
    for policy in policies:
        assert figures[policy.group.slug].reserved_start_p95_s == measured[policy.pk].p95_s
    assert figures["agents"].reserved_start_p95_s == 1.0 and figures["agents"].start_p95_s == 1.0


def test_measure_reads_a_period_in_a_constant_number_of_queries(proposal, django_assert_num_queries):
    # policies, the group tree and its policies, intervals, their events, the reservations' changes,
    # profiles, capacity
    with django_assert_num_queries(8):
        advisor.measure(START, END)
