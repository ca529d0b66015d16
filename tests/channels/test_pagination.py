"""Every list of the user API pages with ``?limit=&offset=``: a limit above the most is served as
the most, an offset past the end gives an empty page, and values that are not whole numbers
answer 400 naming the parameter. No value answers 500 (a huge one used to overflow the database's
integers: bigint out of range on PostgreSQL, datatype mismatch on SQLite)."""

import pytest

from apps.core.pagination import MAX_LIMIT, LimitOffset
from apps.tasks import services

pytestmark = pytest.mark.django_db
HUGE = "57358283469564174336"
LISTS = ["/api/v1/tasks/", "/api/v1/compute-resources/", "/api/v1/schedules/"]


@pytest.fixture
def member(estate, api):
    """The member vera with three tasks, three compute resources and three schedules to list."""
    for i in range(3):
        services.submit(user=estate.member, compute_resource=estate.vision_a100, command=f"run {i}")
        services.create_schedule(
            owner=estate.member,
            name=f"s{i}",
            cron="0 2 * * *",
            compute_resource=estate.vision_a100,
            command="x",
        )
    return api(estate.member)


def test_the_api_pages_with_the_bounded_class_by_default(settings):
    assert settings.REST_FRAMEWORK["DEFAULT_PAGINATION_CLASS"] == "apps.core.pagination.LimitOffset"
    assert LimitOffset.max_limit == MAX_LIMIT == 200 and LimitOffset.default_limit == 50


@pytest.mark.parametrize("path", LISTS)
def test_a_huge_limit_is_served_as_the_most_not_a_500(member, path):
    response = member.get(path, {"limit": HUGE})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["count"] == 3 and len(body["results"]) == 3 and body["next"] is None


@pytest.mark.parametrize("path", LISTS)
def test_a_limit_above_the_most_is_clamped_to_it(member, path, monkeypatch):
    monkeypatch.setattr(LimitOffset, "max_limit", 2)
    body = member.get(path, {"limit": "1000"}).json()
    assert len(body["results"]) == 2 and "limit=2" in body["next"] and "offset=2" in body["next"]
    rest = member.get(body["next"]).json()
    assert len(rest["results"]) == 1 and rest["next"] is None


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize("offset", [HUGE, "9" * 5000, "3"])
def test_an_offset_past_the_end_gives_an_empty_page_not_a_500(member, path, offset):
    response = member.get(path, {"offset": offset, "limit": HUGE})
    assert response.status_code == 200, response.content
    assert response.json()["count"] == 3 and response.json()["results"] == []


@pytest.mark.parametrize("path", LISTS)
def test_limit_and_offset_page_through_the_list(member, path):
    first = member.get(path, {"limit": "2"}).json()
    second = member.get(path, {"limit": "2", "offset": "2"}).json()
    ids = [r["id"] for r in first["results"] + second["results"]]
    assert len(ids) == len(set(ids)) == 3 and second["previous"] is not None


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("limit", "ten"),
        ("limit", "0"),
        ("limit", "-1"),
        ("limit", "1.5"),
        ("limit", "1e3"),
        ("limit", "٣"),
        ("offset", "-1"),
        ("offset", "x"),
        ("offset", "-" + HUGE),
    ],
)
def test_a_limit_or_offset_that_is_not_a_whole_number_answers_400_naming_it(member, path, name, value):
    response = member.get(path, {name: value})
    assert response.status_code == 400, response.content
    assert list(response.json()) == [name]


def test_a_bad_offset_answers_400_even_on_an_empty_list(estate, api):
    response = api(estate.outsider).get("/api/v1/tasks/", {"offset": "x"})
    assert response.status_code == 400 and "offset" in response.json()


def test_the_schema_states_the_bounds_of_limit_and_offset(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/tasks/"]["get"]["parameters"]}
    assert parameters["limit"]["schema"]["minimum"] == 1 and "1-200" in parameters["limit"]["description"]
    assert parameters["offset"]["schema"]["minimum"] == 0
