"""Leadership shares out the organisation's reservation, limit and budget hours among the business
units on the department heads' split page (rule: the same rules, the same audit trail, the same
version check and locks). Acme Labs reserves 220 GPUs, limit 280: Research 140 + Products 80.
Vision gives up 10 of its 60 (its teams hold 48) so that Research may go down to 130; Products'
departments hold its 80 whole, so Products may only grow."""

from decimal import Decimal

import pytest
from django.test import Client

from apps.accounts.models import User
from apps.policies import services as policies
from apps.policies.models import BudgetWindow, PolicyChange, ResourcePolicy
from apps.portal import demo
from tests.portal.conftest import split_form
from tests.portal.test_quota_split_concurrency import at_once

pytestmark = pytest.mark.django_db

URL = "/leadership/split/"
UNITS = ("research", "products")
STALE = "changed by someone else since you opened this page"


def free_vision() -> None:
    """Vision at 50: Research's departments then reserve 130 of its 140."""
    policies.update_policy(policy("vision"), reservation=Decimal(50))


@pytest.fixture
def login(login):
    free_vision()
    return login


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def split_data(**changes) -> dict:
    """The organisation's split form as the page shows it, with ``changes`` {unit: {field: value}}."""
    return split_form(UNITS, **changes)


def quotas() -> dict:
    return {slug: (policy(slug).reservation, policy(slug).limit, policy(slug).budget_hours) for slug in UNITS}


def test_the_leadership_page_links_to_the_split_and_the_split_lists_the_business_units(login):
    client = login("cio")
    assert 'href="/leadership/split/"' in client.get("/leadership/").content.decode()
    page = client.get(URL)
    body = page.content.decode()
    assert page.status_code == 200
    assert "Split Acme Labs's quota" in body
    assert 'data-team="research"' in body and 'data-team="products"' in body
    assert "Business unit" in body and 'data-team="language"' not in body


def test_leadership_moves_gpus_and_hours_between_business_units_saved_together_and_audited(login):
    client = login("cio")
    cio = User.objects.get(username="cio")
    response = client.post(
        URL,
        split_data(
            research={"reservation": "130", "budget_hours": "50000", "budget_period": "month"},
            products={"reservation": "90", "limit": "210"},
        ),
    )
    assert response.status_code == 302 and response["Location"] == "/leadership/"
    assert quotas() == {
        "research": (Decimal(130), Decimal(240), Decimal(50000)),
        "products": (Decimal(90), Decimal(210), None),
    }
    audit = PolicyChange.objects.filter(policy__group__slug__in=UNITS)
    assert {(c.policy.group.slug, c.actor, c.via) for c in audit} == {
        ("research", cio, PolicyChange.Via.PORTAL),
        ("products", cio, PolicyChange.Via.PORTAL),
    }
    research = audit.get(policy__group__slug="research")
    assert [Decimal(value) for value in research.changes["reservation"]] == [140, 130]


def test_leadership_sets_a_further_budget_window_of_a_business_unit(login):
    client = login("cio")
    response = client.post(
        URL,
        split_data(research={"budget_hours": "50000", "budget_period": "month", "window_week": "15000"}),
    )
    assert response.status_code == 302
    assert list(
        BudgetWindow.objects.filter(policy__group__slug="research").values_list("period", "hours")
    ) == [("week", Decimal(15000))]


def test_a_split_above_the_organisations_reservation_is_refused_with_the_rule_and_nothing_saved(login):
    client = login("cio")
    before, audited = quotas(), PolicyChange.objects.count()
    response = client.post(
        URL, split_data(research={"reservation": "200", "limit": "250"}, products={"limit": "150"})
    )
    body = response.content.decode()
    assert response.status_code == 400
    assert "above its reservation (220)" in body
    assert quotas() == before and PolicyChange.objects.count() == audited


def test_a_limit_above_the_organisations_limit_is_refused_and_nothing_saved(login):
    client = login("cio")
    before = quotas()
    response = client.post(URL, split_data(research={"limit": "300"}, products={"reservation": "70"}))
    assert response.status_code == 400
    assert "above" in response.content.decode() and "280" in response.content.decode()
    assert quotas() == before


def test_a_form_opened_before_someone_else_saved_is_refused_and_shows_the_current_values(login):
    client = login("cio")
    stale = split_data(research={"reservation": "130"})
    it = Client()
    it.force_login(User.objects.get(username="it"))
    assert it.post(URL, split_data(research={"limit": "230"})).status_code == 302
    response = client.post(URL, stale)
    assert response.status_code == 409 and STALE in response.content.decode()
    assert policy("research").reservation == 140 and policy("research").limit == 230


@pytest.mark.parametrize(
    "role, answer",
    [
        ("it", 200),
        ("cio", 200),
        ("finance", 403),
        ("head-language", 403),
        ("lead-pretraining", 403),
        ("dev-pretraining", 403),
        ("dev-alignment", 403),
    ],
)
def test_only_leadership_and_it_open_or_save_the_organisations_split(login, role, answer):
    client = login(role)
    before = quotas()
    assert client.get(URL).status_code == answer
    posted = client.post(URL, split_data(research={"reservation": "130"}, products={"reservation": "90"}))
    assert posted.status_code == (302 if answer == 200 else 403)
    if answer == 403:
        assert quotas() == before


def test_leadership_splits_only_the_organisation_not_a_department_below_it(login):
    client = login("cio")
    assert client.get("/departments/acme/split/").status_code == 200
    assert client.get("/departments/language/split/").status_code == 403
    assert client.get("/departments/research/split/").status_code == 403


def test_an_anonymous_visitor_is_sent_to_the_login_page(login):
    response = login(None).get(URL)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_two_splits_of_the_organisation_at_once_never_over_reserve_and_the_stale_one_is_refused():
    """Leadership moves 10 GPUs and IT 5 from Research to Products at the same moment: one wins,
    the other is refused whole (409), the organisation is never over-reserved (130 + 85 or 135 +
    90 would be 225 GPUs of 220) and nothing is lost."""
    demo.seed()
    free_vision()
    cio, it = Client(), Client()
    cio.force_login(User.objects.get(username="cio"))
    it.force_login(User.objects.get(username="it"))
    for _ in range(8):
        ResourcePolicy.objects.filter(group__slug="research").update(reservation=140)
        ResourcePolicy.objects.filter(group__slug="products").update(reservation=80)
        audited = PolicyChange.objects.count()
        cio_form = split_data(research={"reservation": "130"}, products={"reservation": "90"})
        it_form = split_data(research={"reservation": "135"}, products={"reservation": "85"})
        cio_answer, it_answer = at_once(
            lambda form=cio_form: cio.post(URL, form), lambda form=it_form: it.post(URL, form)
        )
        codes = sorted([cio_answer.status_code, it_answer.status_code])
        research, products = policy("research").reservation, policy("products").reservation
        assert codes == [302, 409] and research + products <= 220
        winner = cio_answer if cio_answer.status_code == 302 else it_answer
        expected = (Decimal(130), Decimal(90)) if winner is cio_answer else (Decimal(135), Decimal(85))
        assert (research, products) == expected
        assert PolicyChange.objects.count() == audited + 2
