"""What each role's view shows, from the demo estate with work on it; charts drawn by the plotly.js
served from static (no CDN); tables sorted, filtered and exported as CSV; nothing leaks across
the groups a person may see."""

import re
from datetime import timedelta
from pathlib import Path

import plotly
import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from apps.accounts.models import Membership, User
from apps.engine.services import run_pass, set_engine_enabled
from apps.policies import services as policies
from apps.policies.models import ResourcePolicy
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

CDNS = ("cdn.plot.ly", "jsdelivr", "unpkg", "googleapis")
PAGES = {
    "cio": ["/leadership/", "/finance/"],
    "it": ["/it/"],
    "head-language": ["/departments/language/"],
    "lead-pretraining": ["/teams/pretraining/"],
    "dev-pretraining": ["/work/"],
}


@pytest.fixture
def busy(estate):
    for _ in range(3):
        submit("dev-pretraining", "pretraining/h100-8")
        submit("dev-ranking", "ranking/gpu-flex", gpus="8")
    run_pass()


@pytest.mark.parametrize("username", PAGES)
def test_role_pages_draw_their_charts_with_the_local_plotly_and_no_cdn(login, busy, username):
    client = login(username)
    for url in PAGES[username]:
        page = client.get(url).content.decode()
        assert '<script src="/static/vendor/plotly.min.js"></script>' in page
        assert '<script src="/static/klique/charts.js" defer></script>' in page
        assert 'type="application/json"' in page and "<script>" not in page and "newPlot" not in page
        assert not [cdn for cdn in CDNS if cdn in page], url


def test_the_vendored_plotly_js_is_the_installed_plotly_packages_and_names_no_cdn():
    vendored = (Path(settings.BASE_DIR) / "static/vendor/plotly.min.js").read_text()
    packaged = (Path(plotly.__file__).parent / "package_data/plotly.min.js").read_text()
    version = re.search(r"plotly\.js v[\d.]+", packaged).group()
    assert version in vendored[:200]
    assert not [cdn for cdn in CDNS if cdn in vendored]


def test_no_template_or_static_file_of_the_portal_loads_from_a_cdn():
    root = Path(settings.BASE_DIR)
    files = [*root.glob("templates/**/*.html"), *root.glob("static/klique/*")]
    assert not [(f.name, cdn) for f in files for cdn in CDNS if cdn in f.read_text()]


def test_it_sees_capacity_borrowed_gpus_queues_budgets_near_their_limit_and_the_engine(login, busy):
    set_engine_enabled(False, actor=User.objects.get(username="it"))
    policies.update_policy(ResourcePolicy.objects.get(group__slug="agents"), budget_hours=0)
    page = login("it").get("/it/").content.decode()
    assert 'id="engine-state">engine disabled' in page and "by it" in page
    assert "hpc-slurm" in page and "ranking/gpu-flex" in page
    assert "used up; resets" in page  # agents' budget
    assert 'href="/admin/pools/pool/"' in page
    events = login("it").get("/it/?e-kind=placed&export=csv&table=events").content.decode().splitlines()
    assert events[0].startswith("At (UTC),Task,Compute resource,Kind") and len(events) == 7
    assert all(",Placed," in line for line in events[1:])


def test_it_pools_show_the_borrowed_gpus(login, busy):
    rows = login("it").get("/it/?export=csv&table=pools").content.decode().splitlines()
    onprem = next(line for line in rows if line.startswith("onprem-k8s"))
    # Ranking reserves 16: of its 24 GPUs on gpu-flex (on-prem first), 8 are borrowed.
    assert ",24.000,8.000," in onprem


def test_a_bad_filter_is_refused_with_a_400(login, busy):
    assert login("it").get("/it/?e-task=seven").status_code == 400
    assert login("dev-pretraining").get("/work/?f-where=sometime").status_code == 400


def test_an_unknown_export_is_refused_with_a_400(login):
    assert login("it").get("/it/?export=pdf&table=events").status_code == 400
    assert login("it").get("/it/?export=csv&table=secrets").status_code == 400


def test_a_forbidden_pages_export_is_a_403_too(login):
    assert login("dev-pretraining").get("/it/?export=csv&table=events").status_code == 403
    assert login("head-language").get("/departments/vision/?export=csv&table=teams").status_code == 403


def test_tables_sort_by_their_columns_in_the_page_and_the_export(login):
    for _ in range(2):
        submit("dev-pretraining", "pretraining/h100-8")
    for _ in range(3):
        submit("dev-ranking", "ranking/gpu-flex", gpus="8")
    client = login("it")
    rows = client.get("/it/?queues-sort=-waiting_gpus&export=csv&table=queues").content.decode().splitlines()
    assert [row.split(",")[0] for row in rows[1:3]] == ["ranking/gpu-flex", "pretraining/h100-8"]
    rows = client.get("/it/?queues-sort=waiting_gpus&export=csv&table=queues").content.decode().splitlines()
    assert rows[-1].startswith("ranking/gpu-flex,")
    page = client.get("/it/?queues-sort=-waiting_gpus").content.decode()
    assert page.index(">ranking/gpu-flex<") < page.index(">pretraining/h100-8<")


def test_the_department_shows_its_teams_only_with_use_waiting_work_and_budget_left(login, busy):
    page = login("head-language").get("/departments/language/").content.decode()
    assert "Pretraining" in page and "Alignment" in page and "Ranking" not in page
    teams = (
        login("head-language")
        .get("/departments/language/?export=csv&table=teams")
        .content.decode()
        .splitlines()
    )
    assert [line.split(",")[0] for line in teams[1:]] == ["Alignment", "Pretraining"]
    pretraining = teams[2].split(",")
    assert pretraining[1:5] == ["48.000", "160.000", "24.000", "0.000"]


def test_the_team_shows_its_own_members_only(login):
    rows = login("lead-pretraining").get("/teams/pretraining/?export=csv&table=members").content.decode()
    assert "dev-pretraining" in rows and "dev-alignment" not in rows


def test_leadership_sees_gpu_hours_and_spend_by_business_unit(login, busy):
    # an hour on: the busy work has used GPU-hours that show at the charts' precision, however
    # quickly the page answers
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=False):
        page = login("cio").get("/leadership/").content.decode()
    assert "use-by-unit" in page and "owned-utilisation" in page and "cloud-in-use" in page
    units = login("cio").get("/leadership/?export=csv&table=units").content.decode().splitlines()
    assert units[0].startswith("Group,Kind,Level,Path,")
    assert units[0].endswith("GPU-hours,Budget hours,Cost (EUR)")
    assert {line.split(",")[0] for line in units[1:]} == {"Research", "Products", "Total"}


def test_finance_sees_prices_and_the_chargeback_links(login):
    page = login("finance").get("/finance/").content.decode()
    assert "/reports/?by=group&amp;then_by=project&amp;export=csv" in page
    prices = login("finance").get("/finance/?export=csv&table=prices").content.decode()
    assert "H100,EUR,3.4000" in prices


def test_the_navigation_follows_the_roles_a_person_holds(login):
    person = User.objects.get(username="dev-alignment")
    from apps.accounts import services as accounts
    from apps.accounts.models import Group

    accounts.add_membership(
        user=person, group=Group.objects.get(slug="alignment"), role=Membership.Role.TEAM_LEAD
    )
    accounts.add_membership(user=person, group=Group.objects.get(slug="acme"), role=Membership.Role.FINANCE)
    page = login("dev-alignment").get("/").content.decode()
    nav = re.search(r'<span class="roles">(.*?)</span>', page).group(1)
    assert re.findall(r">([^<]+)</a>", nav) == ["Finance", "Alignment", "My work"]
