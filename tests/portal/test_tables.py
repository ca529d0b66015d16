"""Every table of a role's view has a filter shown on its page that narrows it (in the page and in
its CSV export), keeps the page's other filters, and refuses a bad value with a 400; tables page
at 25 rows and export all of their rows, not one page."""

import csv
import io
import re
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.accounts.models import Group, Membership, User
from apps.engine.models import PassRecord
from apps.engine.services import run_pass
from apps.policies import services as policies
from apps.policies.models import PolicyChange, ResourcePolicy
from apps.pools import services as pools
from apps.pools.models import GpuType, Pool
from apps.portal import services
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db


def exported(client, url: str, table: str, query: str = "") -> list[list[str]]:
    """The table's CSV export (all its rows) with the page's query, without the header."""
    joiner = "&" if query else ""
    response = client.get(f"{url}?{query}{joiner}export=csv&table={table}")
    assert response.status_code == 200, response.content
    return list(csv.reader(io.StringIO(response.content.decode())))[1:]


def first_column(client, url: str, table: str, query: str = "") -> list[str]:
    return [row[0] for row in exported(client, url, table, query)]


def pk(model, **lookup) -> int:
    return model.objects.get(**lookup).pk


@pytest.fixture
def busy(estate):
    for _ in range(3):
        submit("dev-pretraining", "pretraining/h100-8")
        submit("dev-ranking", "ranking/gpu-flex", gpus="8")
    run_pass()


# Leadership.


def test_leadership_filters_the_business_units_by_unit_and_the_total_follows(login, busy):
    client = login("cio")
    assert 'id="id_u-group"' in client.get("/leadership/").content.decode()
    assert first_column(client, "/leadership/", "units") == ["Products", "Research", "Total"]
    research = f"u-group={pk(Group, slug='research')}"
    rows = exported(client, "/leadership/", "units", research)
    assert [row[0] for row in rows] == ["Research", "Total"]
    assert rows[0][-3:] == rows[1][-3:]  # the total is Research's: GPU-hours, budget hours, cost
    assert client.get("/leadership/?u-group=999999").status_code == 400


def test_leadership_filters_the_cloud_pools_by_name_and_gpu_type(login, estate):
    pools.create_pool(
        name="neocloud", kind=Pool.Kind.CLOUD, gpu_type=GpuType.objects.get(name="L40S"), capacity=8
    )
    client = login("cio")
    assert 'id="id_c-gpu_type"' in client.get("/leadership/").content.decode()
    assert sorted(first_column(client, "/leadership/", "cloud")) == ["cloud-h100", "neocloud"]
    assert first_column(client, "/leadership/", "cloud", "c-name=neo") == ["neocloud"]
    h100 = pk(GpuType, name="H100")
    assert first_column(client, "/leadership/", "cloud", f"c-gpu_type={h100}") == ["cloud-h100"]


# Finance.


def test_finance_filters_usage_by_group_subtree_and_by_kind(login, busy):
    client = login("finance")
    page = client.get("/finance/").content.decode()
    assert 'id="id_g-group"' in page and 'id="id_g-level"' in page
    everything = first_column(client, "/finance/", "groups")
    assert {"Acme Labs", "Research", "Products", "Language", "Search", "Pretraining", "Ranking"} <= set(
        everything
    )
    language = first_column(client, "/finance/", "groups", f"g-group={pk(Group, slug='language')}")
    assert language == ["Language", "Pretraining", "Total"]
    assert first_column(client, "/finance/", "groups", "g-level=team") == ["Ranking", "Pretraining", "Total"]
    assert client.get("/finance/?g-level=galaxy").status_code == 400


def test_finance_filters_prices_by_gpu_type(login, estate):
    client = login("finance")
    assert 'id="id_pr-gpu_type"' in client.get("/finance/").content.decode()
    assert len(first_column(client, "/finance/", "prices")) == 4
    assert first_column(client, "/finance/", "prices", "pr-gpu_type=H100") == ["H100"]


# A department.


def test_the_department_filters_its_teams_by_name(login, busy):
    client = login("head-language")
    assert 'id="id_t-group"' in client.get("/departments/language/").content.decode()
    assert first_column(client, "/departments/language/", "teams") == ["Alignment", "Pretraining"]
    assert first_column(client, "/departments/language/", "teams", "t-group=pre") == ["Pretraining"]


def test_the_department_filters_its_quota_changes_by_group_person_and_channel(login, estate):
    it = User.objects.get(username="it")
    for slug, via in (("pretraining", PolicyChange.Via.PORTAL), ("alignment", PolicyChange.Via.ADMIN)):
        PolicyChange.objects.create(
            policy=ResourcePolicy.objects.get(group__slug=slug),
            at=timezone.now(),
            actor=it,
            via=via,
            changes={"reservation": ["24", "32"]},
        )
    client = login("head-language")
    assert 'id="id_c-via"' in client.get("/departments/language/").content.decode()
    url = "/departments/language/"
    assert sorted(row[1] for row in exported(client, url, "changes")) == ["Alignment", "Pretraining"]
    assert [row[1] for row in exported(client, url, "changes", "c-group=align")] == ["Alignment"]
    assert [row[1] for row in exported(client, url, "changes", "c-via=portal")] == ["Pretraining"]
    assert exported(client, url, "changes", "c-actor=finance") == []
    assert client.get(f"{url}?c-via=pigeon").status_code == 400


# A team.


def test_the_team_filters_its_members_by_name_and_role(login, estate):
    client = login("lead-pretraining")
    assert 'id="id_m-person"' in client.get("/teams/pretraining/").content.decode()
    url = "/teams/pretraining/"
    assert sorted(first_column(client, url, "members")) == ["dev-pretraining", "lead-pretraining"]
    assert first_column(client, url, "members", "m-person=dara") == ["dev-pretraining"]
    assert first_column(client, url, "members", "m-role=team_lead") == ["lead-pretraining"]


def test_the_team_filters_its_projects_by_name(login, estate):
    client = login("lead-pretraining")
    assert 'id="id_j-name"' in client.get("/teams/pretraining/").content.decode()
    url = "/teams/pretraining/"
    assert sorted(first_column(client, url, "projects")) == ["llm-70b", "llm-7b"]
    assert first_column(client, url, "projects", "j-name=70b") == ["llm-70b"]


# IT.


def test_it_filters_the_pools_by_kind_name_and_gpu_type(login, estate):
    client = login("it")
    assert 'id="id_p-kind"' in client.get("/it/").content.decode()
    assert len(first_column(client, "/it/", "pools")) == 5
    assert first_column(client, "/it/", "pools", "p-kind=hpc") == ["hpc-slurm"]
    assert sorted(first_column(client, "/it/", "pools", f"p-gpu_type={pk(GpuType, name='A100-80GB')}")) == [
        "onprem-k8s",
        "sovereign",
    ]
    assert first_column(client, "/it/", "pools", "p-name=bare") == ["baremetal"]
    assert client.get("/it/?p-kind=moon").status_code == 400


def test_it_filters_the_budgets_near_their_limit_by_group_and_period(login, estate):
    for slug in ("agents", "ranking"):
        policies.update_policy(ResourcePolicy.objects.get(group__slug=slug), budget_hours=0)
    client = login("it")
    assert 'id="id_b-period"' in client.get("/it/").content.decode()
    assert sorted(first_column(client, "/it/", "budgets")) == ["Agents", "Ranking"]
    assert first_column(client, "/it/", "budgets", "b-group=agen") == ["Agents"]
    assert first_column(client, "/it/", "budgets", "b-period=week") == ["Ranking"]


def test_it_filters_the_engine_passes_by_outcome_and_duration(login, busy):
    run_pass()  # nothing left to place
    PassRecord.objects.create(started_at=timezone.now(), skipped=True, skip_reason="locked", duration_ms=0)
    client = login("it")
    assert 'id="id_s-changed"' in client.get("/it/").content.decode()

    def placed(query: str = "") -> list[str]:
        return [row[4] for row in exported(client, "/it/", "passes", query)]

    assert sorted(placed()) == ["0", "0", "6"]
    assert placed("s-changed=yes") == ["6"]
    assert len(placed("s-changed=no")) == 2
    assert [row[1] for row in exported(client, "/it/", "passes", "s-skipped=yes")] == ["True"]
    assert len(placed("s-skipped=no")) == 2
    assert client.get("/it/?s-slower_than=fast").status_code == 400


@pytest.mark.parametrize(
    "who, url",
    [
        ("it", "/it/?s-slower_than=abc&export=csv&table=passes"),
        ("it", "/it/?p-kind=moon&export=csv&table=pools"),
        ("finance", "/finance/?g-group=999999&export=csv&table=groups"),
        ("finance", "/finance/?g-level=galaxy&export=csv&table=groups"),
    ],
)
def test_an_export_with_a_refused_filter_is_refused_not_exported_unfiltered(login, estate, who, url):
    response = login(who).get(url)
    assert response.status_code == 400
    assert "text/csv" not in response.get("Content-Type", "")


def test_a_filter_form_keeps_the_pages_other_filters_and_sorting(login, estate):
    page = login("it").get("/it/?q-group=rank&queues-sort=name&p-kind=hpc&pools-page=1").content.decode()
    pool_form = page.split('id="pools"', 1)[1].split("</form>", 1)[0]
    assert '<input type="hidden" name="q-group" value="rank">' in pool_form
    assert '<input type="hidden" name="queues-sort" value="name">' in pool_form
    assert 'name="p-kind"' in pool_form and 'type="hidden" name="p-kind"' not in pool_form
    assert 'name="pools-page"' not in pool_form  # a new filter starts on its table's first page


# A developer.


def test_my_compute_resources_filter_by_name(login, estate):
    client = login("dev-pretraining")
    assert 'id="id_r-name"' in client.get("/work/").content.decode()
    assert sorted(first_column(client, "/work/", "resources")) == [
        "pretraining/cpu-only",
        "pretraining/gpu-flex",
        "pretraining/h100-8",
    ]
    assert first_column(client, "/work/", "resources", "r-name=flex") == ["pretraining/gpu-flex"]


# Pagination and exports.


def _rows_on_page(page: str, section: str) -> int:
    table = page.split(f'id="{section}"', 1)[1].split("</section>", 1)[0]
    return len(re.findall(r"<tr[ >]", table.split("<tbody", 1)[1]))


def test_a_table_longer_than_a_page_pages_and_its_export_has_every_row(login, estate):
    tasks = [submit("dev-pretraining", "pretraining/cpu-only", name=f"job {i}").pk for i in range(30)]
    client = login("dev-pretraining")
    first = client.get("/work/").content.decode()
    second = client.get("/work/?tasks-page=2").content.decode()
    assert _rows_on_page(first, "tasks") == 25 and _rows_on_page(second, "tasks") == 5
    shown = {int(n) for page in (first, second) for n in re.findall(r'href="/work/tasks/(\d+)/"', page)}
    assert shown == set(tasks)
    assert 'href="?tasks-page=2"' in first
    everything = exported(client, "/work/", "tasks")
    assert sorted(int(row[0]) for row in everything) == sorted(tasks)
    # the export of a second page is still every row, and a filtered export every row it keeps
    assert len(exported(client, "/work/", "tasks", "tasks-page=2")) == 30
    assert len(exported(client, "/work/", "tasks", "f-where=waiting")) == 30


def test_a_table_built_from_figures_pages_and_exports_every_row_too(login, estate):
    team = Group.objects.get(slug="pretraining")
    for i in range(30):
        person = User.objects.create_user(username=f"person-{i:02d}", password="x")
        services.add_member(group=team, user=person)
    assert Membership.objects.filter(group=team).count() == 32
    client = login("lead-pretraining")
    first = client.get("/teams/pretraining/").content.decode()
    second = client.get("/teams/pretraining/?members-page=2").content.decode()
    assert _rows_on_page(first, "members") == 25 and _rows_on_page(second, "members") == 7
    assert len(exported(client, "/teams/pretraining/", "members")) == 32
    assert len(exported(client, "/teams/pretraining/", "members", "m-person=person-")) == 30


def test_an_export_writes_each_figure_column_in_one_format_whatever_the_database_returns():
    """SQLite may return an aggregate as 4 where PostgreSQL returns 4.000: the export must not."""
    from apps.portal.tables import GpuColumn, HoursColumn

    assert [GpuColumn().value(v) for v in (4, Decimal("4.000"), 4.0, Decimal("0.5"), None)] == [
        "4.000",
        "4.000",
        "4.000",
        "0.500",
        "",
    ]
    assert [HoursColumn().value(v) for v in (24, Decimal("23.9984"), 0)] == ["24.000", "23.998", "0.000"]
