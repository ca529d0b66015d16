"""Every role x every portal page: allowed (200) or forbidden (403), and every page needs login.
A department head sees only their department's subtree, a team lead only their group, a member
only their own work."""

import pytest

from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

ROLES = ["it", "cio", "finance", "head-language", "lead-pretraining", "dev-pretraining", "dev-alignment"]
ESTATE = {"it", "cio", "finance"}
EVERYONE = set(ROLES)

# page -> the people who may open it (everyone else gets a 403)
MATRIX = {
    "/": EVERYONE,
    "/leadership/": {"it", "cio"},
    "/it/": {"it"},
    "/finance/": ESTATE,
    "/departments/language/": ESTATE | {"head-language"},
    "/departments/vision/": ESTATE,
    "/departments/language/split/": {"it", "head-language"},
    "/departments/vision/split/": {"it"},
    "/teams/pretraining/": ESTATE | {"head-language", "lead-pretraining"},
    "/teams/alignment/": ESTATE | {"head-language"},
    "/teams/perception/": ESTATE,
    "/work/": EVERYONE,
    "/work/tasks/{pretraining_task}/": ESTATE | {"head-language", "lead-pretraining", "dev-pretraining"},
    "/work/tasks/{alignment_task}/": ESTATE | {"head-language", "dev-alignment"},
    "/notifications/": EVERYONE,
}


@pytest.fixture
def urls(estate):
    ids = {
        "pretraining_task": submit("dev-pretraining", "pretraining/h100-8").pk,
        "alignment_task": submit("dev-alignment", "alignment/a100-1").pk,
    }
    return {template.format(**ids): allowed for template, allowed in MATRIX.items()}


@pytest.mark.parametrize("role", ROLES)
def test_each_role_opens_its_pages_and_is_refused_the_others(login, urls, role):
    client = login(role)
    answers = {url: client.get(url).status_code for url in urls}
    expected = {url: 200 if role in allowed else 403 for url, allowed in urls.items()}
    assert answers == expected


def test_every_portal_page_sends_an_anonymous_visitor_to_the_login_page(login, urls):
    client = login(None)
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url


def test_an_unknown_group_is_a_404_not_a_500(login):
    client = login("it")
    assert client.get("/departments/nowhere/").status_code == 404
    assert client.get("/teams/nowhere/").status_code == 404
