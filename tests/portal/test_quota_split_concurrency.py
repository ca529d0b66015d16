"""Two people change Language's split at the same moment, on PostgreSQL, each request on its own
connection, lined up by a barrier (rule: a quota write locks the parent policy and the rows it
writes, re-checks the sibling sums under the lock, and refuses a form older than the stored row).

Language reserves 80: Pretraining 48 + Alignment 24. The head raises Alignment to 32, IT raises
Pretraining to 56: each alone fits, together they make 88. One must win and the other be refused,
named, with nothing of it saved; the parent is never over-reserved and no change is lost."""

import threading
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from apps.accounts.models import User
from apps.policies import services as policies
from apps.policies import split
from apps.policies.models import PolicyChange
from apps.portal import demo
from tests.portal.test_quota_split import URL, policy, split_data

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

RACES = 20
STALE = "changed by someone else since you opened this page"


def admin_form(slug: str, **changes) -> dict:
    """IT's admin change form of one policy as rendered now, with ``changes``."""
    p = policy(slug)
    return {
        "group": p.group_id,
        "reservation": p.reservation,
        "limit": p.limit,
        "budget_hours": "" if p.budget_hours is None else p.budget_hours,
        "budget_period": p.budget_period,
        "alert_threshold": p.alert_threshold,
        "seen_version": p.version,
        "compute_resources-TOTAL_FORMS": "0",
        "compute_resources-INITIAL_FORMS": "0",
        "extra_budgets-TOTAL_FORMS": "0",
        "extra_budgets-INITIAL_FORMS": "0",
    } | changes


def reset() -> None:
    """Language's split as the demo sets it: reservations 24 + 48 of 80, budgets 8000 + 24000 h of 40000."""
    policies.update_policy(policy("alignment"), reservation=Decimal("24"), budget_hours=Decimal("8000"))
    policies.update_policy(policy("pretraining"), reservation=Decimal("48"), budget_hours=Decimal("24000"))


def at_once(*calls):
    """Run each call in its own thread (its own database connection), released together."""
    barrier, results, errors = threading.Barrier(len(calls)), [None] * len(calls), []

    def run(i, call):
        try:
            barrier.wait()
            results[i] = call()
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return results


@pytest.fixture
def people(db):
    demo.seed()

    def client_of(username):
        client = Client()
        client.force_login(User.objects.get(username=username))
        return client

    return client_of("head-language"), client_of("it")


def reservations() -> tuple[Decimal, Decimal]:
    return policy("alignment").reservation, policy("pretraining").reservation


def test_two_splits_at_once_never_over_reserve_and_the_later_stale_form_is_refused(people):
    head, it = people
    outcomes = []
    for _ in range(RACES):
        reset()
        audited = PolicyChange.objects.count()
        head_form = split_data(alignment={"reservation": "32"})
        it_form = split_data(pretraining={"reservation": "56"})
        head_answer, it_answer = at_once(
            lambda form=head_form: head.post(URL, form), lambda form=it_form: it.post(URL, form)
        )
        alignment, pretraining = reservations()
        outcomes.append((head_answer.status_code, it_answer.status_code, alignment, pretraining))
        assert alignment + pretraining <= 80, outcomes
        assert sorted([head_answer.status_code, it_answer.status_code]) == [302, 409], outcomes
        winner, loser = (
            (head_answer, it_answer) if head_answer.status_code == 302 else (it_answer, head_answer)
        )
        assert STALE in loser.content.decode()
        # The winner's change is what is stored (nothing silently overwritten) and audited once.
        expected = (Decimal("32"), Decimal("48")) if winner is head_answer else (Decimal("24"), Decimal("56"))
        assert (alignment, pretraining) == expected, outcomes
        assert PolicyChange.objects.count() == audited + 1


@pytest.mark.parametrize(
    "field, alignment_to, pretraining_to, refusal",
    [
        (
            "reservation",
            "32",
            "56",
            "brings the reservations under Language policy to 88, above its reservation (80)",
        ),
        (
            "budget_hours",
            "16000",
            "32000",
            "brings the budgets under Language policy to 48000 h, above its budget (40000 h)",
        ),
    ],
    ids=["reservations", "budgets"],
)
def test_two_services_at_once_without_forms_re_check_the_sums_under_the_lock(
    people, field, alignment_to, pretraining_to, refusal
):
    """Each call writes only its own row (no earlier read to be stale): the lock on the parent makes
    the later one see the earlier one's value, and the sum rule refuses it."""
    language = policy("language")
    head, it = User.objects.get(username="head-language"), User.objects.get(username="it")
    outcomes = []

    def change(actor, slug, value):
        def call():
            target = policy(slug)
            row = policies.quota_of(target) | {field: Decimal(value)}
            try:
                split.split_quota(language, {target.pk: row}, actor=actor)
            except split.SplitRefused as refused:
                return refused.errors[target.pk][field][0]
            return "saved"

        return call

    for _ in range(RACES):
        reset()
        answers = at_once(change(head, "alignment", alignment_to), change(it, "pretraining", pretraining_to))
        alignment, pretraining = policy("alignment"), policy("pretraining")
        values = getattr(alignment, field), getattr(pretraining, field)
        outcomes.append((*answers, *values))
        assert sum(values) <= getattr(language, field), outcomes
        assert answers.count("saved") == 1, outcomes
        assert refusal in next(answer for answer in answers if answer != "saved")


def test_the_admin_and_the_split_at_once_never_over_reserve(people):
    head, it = people
    it.force_login(User.objects.get(username="it"))
    admin_url = reverse("admin:policies_resourcepolicy_change", args=[policy("alignment").pk])
    outcomes = []
    for _ in range(RACES):
        reset()
        head_form = split_data(pretraining={"reservation": "56"})
        it_form = admin_form("alignment", reservation="32")
        head_answer, it_answer = at_once(
            lambda form=head_form: head.post(URL, form), lambda form=it_form: it.post(admin_url, form)
        )
        alignment, pretraining = reservations()
        outcomes.append((head_answer.status_code, it_answer.status_code, alignment, pretraining))
        assert alignment + pretraining <= 80, outcomes
        saved = [head_answer.status_code == 302, it_answer.status_code == 302]
        assert saved.count(True) == 1, outcomes
        if saved[0]:
            # The split came first; the admin's form was not stale for Alignment, so the sum rule refuses it.
            assert "brings the reservations under Language policy to 88" in it_answer.content.decode()
        else:
            assert head_answer.status_code == 409 and STALE in head_answer.content.decode()
