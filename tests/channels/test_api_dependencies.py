"""Rule 2 (dependencies) over the API: ``after_ok`` and ``after_any`` on submit and bulk (where an
item may name an earlier item as ``{"item": n}``), what a task shows (its dependency ids, and on
its page each link with the other task's state), and every refusal a 400 naming the field."""

import pytest

from apps.tasks.models import Task, TaskDependency

pytestmark = pytest.mark.django_db

TASKS = "/api/v1/tasks/"


def submit(client, **body):
    return client.post(TASKS, {"compute_resource": "vision/a100", "command": "train", **body}, format="json")


def test_dependencies_a_task_runs_after_others_and_both_ends_show_the_link(estate, api):
    client = api(estate.member)
    first, second = submit(client).json()["id"], submit(client).json()["id"]
    response = submit(client, after_ok=[first], after_any=[second])
    assert response.status_code == 201, response.json()
    shown = response.json()
    assert shown["after_ok"] == [first] and shown["after_any"] == [second]
    assert shown["dependencies"] == [
        {"task": first, "kind": "after_ok", "state": "queued"},
        {"task": second, "kind": "after_any", "state": "queued"},
    ]
    assert Task.objects.get(pk=shown["id"]).waits_on == 2
    upstream = client.get(f"{TASKS}{first}/").json()
    assert upstream["dependants"] == [{"task": shown["id"], "kind": "after_ok", "state": "queued"}]
    listed = {t["id"]: t for t in client.get(TASKS).json()["results"]}
    assert listed[shown["id"]]["after_ok"] == [first] and listed[first]["after_ok"] == []


def test_dependencies_a_bulk_item_names_an_earlier_item_of_the_same_request(estate, api):
    items = [
        {"compute_resource": "vision/a100", "command": "prepare"},
        {"compute_resource": "vision/a100", "command": "train", "after_ok": [{"item": 0}]},
        {"compute_resource": "vision/a100", "command": "report", "after_any": [{"item": 0}, {"item": 1}]},
    ]
    response = api(estate.member).post(f"{TASKS}bulk/", {"tasks": items}, format="json")
    assert response.status_code == 201, response.json()
    ids = [t["id"] for t in response.json()]
    assert response.json()[1]["after_ok"] == [ids[0]]
    assert response.json()[2]["after_any"] == ids[:2]
    assert TaskDependency.objects.count() == 3


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("after_ok", [999999], "Task 999999 is unknown (or not yours)."),
        ("after_any", "12", "Give a list of task ids"),
        ("after_ok", ["12"], "Entry 0 is neither a task id"),
        ("after_ok", [0], "Entry 0 is neither a task id"),
        ("after_ok", [1.5], "Entry 0 is neither a task id"),
        ("after_ok", [{"item": 0, "x": 1}], "Entry 0 is neither a task id"),
        ("after_ok", [{"item": 0}], "only in a bulk submission"),
        ("after_ok", list(range(1, 102)), "At most 100 dependencies per task."),
    ],
)
def test_dependencies_bad_input_is_400_naming_the_field(estate, api, field, value, words):
    response = submit(api(estate.member), **{field: value})
    assert response.status_code == 400, response.json()
    assert list(response.json()) == [field] and words in str(response.json()[field])
    assert not Task.objects.exists()


def test_dependencies_another_users_task_reads_as_unknown(estate, api):
    theirs = submit(api(estate.other_member)).json()["id"]
    response = submit(api(estate.member), after_ok=[theirs])
    assert response.status_code == 400
    assert response.json() == {"after_ok": [f"Task {theirs} is unknown (or not yours)."]}


def test_dependencies_a_bulk_item_may_not_name_itself_or_a_later_item(estate, api):
    items = [
        {"compute_resource": "vision/a100", "command": "a", "after_ok": [{"item": 1}]},
        {"compute_resource": "vision/a100", "command": "b", "after_any": [{"item": 1}]},
    ]
    response = api(estate.member).post(f"{TASKS}bulk/", {"tasks": items}, format="json")
    assert response.status_code == 400
    errors = response.json()["tasks"]
    assert list(errors["0"]) == ["after_ok"] and "not an earlier item" in errors["0"]["after_ok"][0]
    assert list(errors["1"]) == ["after_any"] and "not an earlier item" in errors["1"]["after_any"][0]
    assert not Task.objects.exists()


def test_dependencies_after_ok_on_a_task_that_did_not_succeed_is_refused(estate, api):
    client = api(estate.member)
    failed = submit(client).json()["id"]
    Task.objects.filter(pk=failed).update(state=Task.State.FAILED)
    response = submit(client, after_ok=[failed])
    assert response.status_code == 400 and list(response.json()) == ["after_ok"]
    assert "could never run" in response.json()["after_ok"][0]


def test_dependencies_a_session_runs_after_no_task(estate, api):
    first = submit(api(estate.member)).json()["id"]
    response = api(estate.member).post(
        TASKS, {"kind": "session", "compute_resource": "vision/a100", "after_ok": [first]}, format="json"
    )
    assert response.status_code == 400 and list(response.json()) == ["after_ok"]
