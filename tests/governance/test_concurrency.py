"""Approvals at the same moment, on PostgreSQL, each on its own connection, lined up by a barrier
(rule: an approval locks the request row and, through ``lock_policies``, the policy and its parent,
then re-checks the sums under the lock, like every other quota write)."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.accounts.models import Membership
from apps.governance import services
from apps.governance.models import ChangeRequest
from apps.policies import services as policies
from apps.policies.models import PolicyChange
from apps.portal import demo
from tests.governance.conftest import ask, group, person, policy
from tests.portal.test_quota_split_concurrency import at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

RACES = 5


@pytest.fixture
def heads(db):
    demo.seed()
    Membership.objects.create(
        user=person("dev-alignment"), group=group("language"), role=Membership.Role.DEPARTMENT_HEAD
    )
    Membership.objects.create(
        user=person("dev-pretraining"), group=group("alignment"), role=Membership.Role.TEAM_LEAD
    )
    return person("head-language"), person("dev-alignment")


def outcome(request, actor, decision, **kwargs):
    def call():
        try:
            services.decide(request, actor=actor, decision=decision, **kwargs)
        except ValidationError as error:
            return error.message_dict
        return "ok"

    return call


def test_two_heads_deciding_one_request_at_once_decide_it_once(heads):
    head, other = heads
    for _ in range(RACES):
        request = ask("lead-pretraining", "pretraining", reservation=Decimal("50"))
        audited = PolicyChange.objects.count()
        results = at_once(
            outcome(request, head, services.Decision.APPROVE),
            outcome(request, other, services.Decision.DENY, comment="No."),
        )
        assert sorted(map(str, results)).count("ok") == 1, results
        refused = next(r for r in results if r != "ok")
        assert "already" in refused["decision"][0]
        request.refresh_from_db()
        approved = request.state == ChangeRequest.State.APPROVED
        assert PolicyChange.objects.count() == audited + (1 if approved else 0)
        policies.update_policy(policy("pretraining"), reservation=Decimal("48"))


def test_two_approvals_that_fit_alone_but_not_together_never_over_reserve(heads):
    """Pretraining asks 56 (+8) and Alignment 32 (+8) of Language's 80 (48 + 24 reserved)."""
    head, other = heads
    for _ in range(RACES):
        policies.update_policy(policy("pretraining"), reservation=Decimal("48"))
        policies.update_policy(policy("alignment"), reservation=Decimal("24"))
        first = ask("lead-pretraining", "pretraining", reservation=Decimal("56"))
        second = ask("dev-pretraining", "alignment", reservation=Decimal("32"))
        results = at_once(
            outcome(first, head, services.Decision.APPROVE),
            outcome(second, other, services.Decision.APPROVE),
        )
        assert results.count("ok") == 1, results
        refused = next(r for r in results if r != "ok")
        assert "above its reservation (80)" in refused["reservation"][0]
        assert policy("pretraining").reservation + policy("alignment").reservation == Decimal("80")
        states = {ChangeRequest.objects.get(pk=r.pk).state for r in (first, second)}
        assert states == {ChangeRequest.State.APPROVED, ChangeRequest.State.PENDING}
