"""Finance and leadership scoped to their business unit: held on Research they see Research's
figures, statements, budgets and tasks only (Products' rows absent, totals Research's, Products'
objects refused) over the API, the portal and the exports; held at the organisation's root they
see the whole estate; IT admins see it from any group; several roles see the union."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from openpyxl import load_workbook

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership
from apps.accounts.selectors import managed_group_ids, sees_whole_estate
from apps.ledger import rollups
from apps.policies import services as policies
from apps.pricing import services as pricing
from tests.factories import ComputeResourceFactory, ProfileFactory, UserFactory
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

Role = Membership.Role
APRIL = "period=month&date=2026-04-10"
UNIT_VIEWERS = ["fin-research", "cio-research"]
RESEARCH_GROUPS = {"Research", "Language", "Pretraining", "Vision", "Perception"}
PRODUCTS_GROUPS = {"Products", "Ranking"}


@pytest.fixture
def estate():
    """Research (Pretraining 20 GPU-hours, Perception 3) and Products (Ranking 20) at 2.00 EUR per
    GPU-hour: Research costs 46.00 of the estate's 86.00."""
    estate = make_estate()
    products = accounts.create_group(
        name="Products", slug="products", kind=Group.Kind.BUSINESS_UNIT, parent=estate.org
    )
    products.cost_centre = "CC-PROD"
    products.save()
    estate.bu.cost_centre = "CC-RES"
    estate.bu.save()
    ranking = accounts.create_group(name="Ranking", slug="ranking", kind=Group.Kind.TEAM, parent=products)
    policy = policies.create_policy(group=ranking, reservation=0, limit=16)
    estate.resources["ranking"] = ComputeResourceFactory(
        name="ranking-flex", policy=policy, profile=ProfileFactory(gpus=1, size_from_task=True)
    )
    u = estate.users
    for name, role, group in [
        ("dave", Role.MEMBER, ranking),
        ("fin-research", Role.FINANCE, estate.bu),
        ("cio-research", Role.LEADERSHIP, estate.bu),
        ("it-research", Role.IT_ADMIN, estate.bu),
    ]:
        u[name] = UserFactory(username=name)
        accounts.add_membership(user=u[name], group=group, role=role)
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour=Decimal("2.00"), effective_from=date(2026, 1, 1), via="system"
    )
    day = datetime(2026, 4, 10, tzinfo=UTC)
    record(estate, estate.team_a, u["alice"], estate.onprem, day, day + timedelta(hours=10), gpus="2")
    record(estate, estate.team_c, u["carol"], estate.onprem, day, day + timedelta(hours=3))
    record(estate, ranking, u["dave"], estate.onprem, day, day + timedelta(hours=5), gpus="4")
    rollups.refresh(datetime(2026, 5, 2, tzinfo=UTC))
    estate.ranking = ranking
    estate.products = products
    return estate


def as_user(client, estate, name):
    client.force_login(estate.users[name])
    return client


def csv_rows(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.content.decode())))


def xlsx_rows(response) -> list[list]:
    return [
        list(row) for row in load_workbook(io.BytesIO(response.content)).active.iter_rows(values_only=True)
    ]


def column(rows: list[list], title: str) -> list:
    at = rows[0].index(title)
    return [row[at] for row in rows[1:]]


def api_rows(data) -> list[dict]:
    return data["results"] if isinstance(data, dict) else data


# The one rule.


def test_finance_and_leadership_at_the_root_see_the_whole_estate_and_of_a_unit_its_subtree(estate):
    u = estate.users
    for name in ("fin", "cio", "it", "it-research"):
        assert sees_whole_estate(u[name]) and managed_group_ids(u[name]) is None, name
    research = {g.pk for g in (estate.bu, estate.dept, estate.team_a, estate.team_b)} | {
        estate.other_dept.pk,
        estate.team_c.pk,
    }
    for name in UNIT_VIEWERS:
        assert not sees_whole_estate(u[name])
        assert managed_group_ids(u[name]) == research


def test_a_person_with_roles_on_two_units_sees_the_union_of_their_subtrees(client, estate):
    accounts.add_membership(user=estate.users["fin-research"], group=estate.ranking, role=Role.TEAM_LEAD)
    data = as_user(client, estate, "fin-research").get(f"/api/v1/usage/report/?{APRIL}&by=group").json()
    assert {r["group"] for r in data["rows"]} >= {"Research", "Ranking"}
    assert data["total"]["gpu_hours"] == "43.000" and data["total"]["cost"] == "86.00"


# The usage report: the API, the page and its exports.


@pytest.mark.parametrize("name", UNIT_VIEWERS)
def test_a_units_finance_and_leadership_get_only_its_rows_and_totals_from_the_report_api(
    client, estate, name
):
    data = as_user(client, estate, name).get(f"/api/v1/usage/report/?{APRIL}&by=group").json()
    shown = {r["group"] for r in data["rows"]}
    assert shown & RESEARCH_GROUPS and not shown & PRODUCTS_GROUPS
    assert data["total"]["gpu_hours"] == "23.000" and data["total"]["cost"] == "46.00"
    assert "cloud_spend" not in data


def test_finance_at_the_root_gets_every_units_rows_and_the_estates_totals(client, estate):
    data = as_user(client, estate, "fin").get(f"/api/v1/usage/report/?{APRIL}&by=group").json()
    assert {"Research", "Products", "Ranking"} <= {r["group"] for r in data["rows"]}
    assert data["total"]["gpu_hours"] == "43.000" and data["total"]["cost"] == "86.00"


@pytest.mark.parametrize("name", UNIT_VIEWERS)
@pytest.mark.parametrize("query", ["group=products", "group=ranking", "idle=spread"])
def test_another_units_figures_are_a_403_on_the_page_its_exports_and_the_api(client, estate, name, query):
    as_user(client, estate, name)
    for url in (
        f"/reports/?{APRIL}&{query}",
        f"/reports/?{APRIL}&{query}&export=csv",
        f"/reports/?{APRIL}&{query}&export=xlsx",
        f"/api/v1/usage/report/?{APRIL}&{query}",
        f"/api/v1/usage/report/?{APRIL}&{query}&format=csv",
    ):
        assert client.get(url).status_code == 403, url


@pytest.mark.parametrize("name", UNIT_VIEWERS)
def test_a_units_csv_and_xlsx_exports_hold_its_rows_only_and_its_totals(client, estate, name):
    as_user(client, estate, name)
    for rows in (
        csv_rows(client.get(f"/reports/?{APRIL}&by=group&export=csv")),
        csv_rows(client.get(f"/api/v1/usage/report/?{APRIL}&by=group&format=csv")),
        xlsx_rows(client.get(f"/reports/?{APRIL}&by=group&export=xlsx")),
    ):
        groups = column(rows, "Group")
        assert not set(groups) & PRODUCTS_GROUPS and "Research" in groups
        assert Decimal(str(column(rows, "GPU-hours")[groups.index("Total")])) == Decimal("23")
        assert Decimal(str(column(rows, "Cost (EUR)")[groups.index("Total")])) == Decimal("46")


@pytest.mark.parametrize("name", UNIT_VIEWERS)
def test_the_report_page_shows_and_offers_only_the_units_groups(client, estate, name):
    response = as_user(client, estate, name).get(f"/reports/?{APRIL}&by=group")
    page = response.content.decode()
    assert response.status_code == 200 and "Research" in page and "Ranking" not in page
    offered = {str(g) for g in response.context["form"].fields["group"].queryset}
    assert offered == RESEARCH_GROUPS | {"Alignment"}


# Statements and the cost-centre cut.


@pytest.mark.parametrize("name", UNIT_VIEWERS)
def test_a_unit_downloads_its_own_statements_and_is_refused_another_units(client, estate, name):
    as_user(client, estate, name)
    offered = client.get("/reports/statements/").content.decode()
    assert 'value="research"' in offered and 'value="products"' not in offered
    assert 'value="ranking"' not in offered
    for fmt in ("pdf", "csv"):
        mine = client.get(f"/reports/statements/?group=research&month=2026-04&currency=EUR&format={fmt}")
        assert mine.status_code == 200, fmt
        for slug in ("products", "ranking"):
            url = f"/reports/statements/?group={slug}&month=2026-04&currency=EUR&format={fmt}"
            assert client.get(url).status_code == 403, url


def test_a_units_cost_centre_cut_holds_its_cost_centres_only(client, estate):
    as_user(client, estate, "fin-research")
    rows = csv_rows(client.get("/reports/cost-centres/?month=2026-04&currency=EUR"))
    assert set(column(rows, "cost_centre")) == {"CC-RES"}
    assert sum(Decimal(a) for a in column(rows, "amount")) == Decimal("46.00")
    as_user(client, estate, "fin")
    rows = csv_rows(client.get("/reports/cost-centres/?month=2026-04&currency=EUR"))
    assert set(column(rows, "cost_centre")) == {"CC-RES", "CC-PROD"}


# Budgets and tasks.


@pytest.mark.parametrize("name", UNIT_VIEWERS)
def test_a_units_budgets_api_lists_its_policies_only(client, estate, name):
    rows = as_user(client, estate, name).get("/api/v1/usage/").json()
    slugs = {row["group"]["slug"] for row in rows}
    assert slugs == {"language", "pretraining", "alignment", "perception"}


@pytest.mark.parametrize("name", UNIT_VIEWERS)
def test_a_unit_lists_and_opens_its_tasks_and_never_another_units(client, estate, name):
    as_user(client, estate, name)
    listed = api_rows(client.get("/api/v1/tasks/").json())
    users = {row["user"] if isinstance(row["user"], str) else row["user"]["username"] for row in listed}
    assert "dave" not in users and {"alice", "carol"} <= users
    products_task = estate.resources["ranking"].tasks.first()
    research_task = estate.resources["pretraining"].tasks.first()
    assert client.get(f"/api/v1/tasks/{products_task.pk}/").status_code == 404
    assert client.get(f"/api/v1/tasks/{research_task.pk}/").status_code == 200
    assert client.get(f"/work/tasks/{products_task.pk}/").status_code == 403
    assert client.get(f"/work/tasks/{research_task.pk}/").status_code == 200


# The portal's finance and month-close pages.


def test_a_units_finance_page_has_its_groups_and_no_estate_cloud_spend(client, estate):
    page = as_user(client, estate, "fin-research").get("/finance/").content.decode()
    assert "Research" in page and "Ranking" not in page and 'id="cloud-spend"' not in page
    page = as_user(client, estate, "fin").get("/finance/").content.decode()
    assert "Ranking" in page and 'id="cloud-spend"' in page


def test_a_unit_sees_its_own_adjustments_on_the_month_close_page_and_closes_no_month(client, estate):
    from apps.ledger.models import Adjustment

    for group in (estate.team_a, estate.ranking):
        Adjustment.objects.create(
            group=group,
            gpu_type=estate.a100,
            closed_month=date(2026, 3, 1),
            booked_in=date(2026, 4, 1),
            gpu_us=3_600_000_000,
            budget_us=3_600_000_000,
            cost_units=0,
            cost=Decimal("0.00"),
            at=datetime(2026, 4, 2, tzinfo=UTC),
            currency="EUR",
            reason=f"late {group.slug}",
        )
    as_user(client, estate, "fin-research")
    page = client.get("/finance/months/").content.decode()
    assert "late pretraining" in page and "late ranking" not in page
    assert client.post("/finance/months/close/", {"month": "2026-03"}).status_code == 403
