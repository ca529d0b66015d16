"""Multi-node work in the portal: a task counts GPUs x nodes in every figure it appears in (pools,
queues, borrowed capacity, a team's members, a department's teams), shows as "nodes x GPUs", and
the developer's submit form takes its nodes with the service's reasons on the field."""

import csv
import io
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.engine.services import run_pass
from apps.pools.models import Pool
from apps.portal import selectors
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

FLEX_POOLS = ["onprem-k8s", "baremetal", "cloud-h100"]


@pytest.fixture
def multi_node_flex(estate):
    """The demo's gpu-flex profile on pools that all run multi-node work."""
    Pool.objects.filter(name__in=FLEX_POOLS).update(multi_node=True)


def rows(client, url: str, table: str) -> list[dict[str, str]]:
    response = client.get(f"{url}?export=csv&table={table}")
    assert response.status_code == 200, response.content
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def row(found: list[dict[str, str]], column: str, value: str) -> dict[str, str]:
    return next(r for r in found if r[column] == value)


def two_by_two(username: str = "dev-pretraining", resource: str = "pretraining/gpu-flex", **fields):
    return submit(username, resource, gpus="2", nodes=2, **fields)


def test_a_two_node_task_of_two_gpus_counts_four_in_the_it_views_pools_and_queues(login, multi_node_flex):
    placed = two_by_two(name="placed")
    run_pass()
    assert Task.objects.get(pk=placed.pk).pool.name == "onprem-k8s"
    two_by_two(name="waiting")
    client = login("it")
    pools = rows(client, "/it/", "pools")
    assert row(pools, "Pool", "onprem-k8s")["In use"] == "4.000"
    assert row(pools, "Pool", "onprem-k8s")["Free"] == "60.000"
    queue = row(rows(client, "/it/", "queues"), "Compute resource", "pretraining/gpu-flex")
    assert (queue["Placed or running"], queue["GPUs in use"]) == ("1", "4.000")
    assert (queue["Waiting"], queue["GPUs waiting"]) == ("1", "4.000")


def test_a_two_node_task_on_a_cloud_pool_counts_four_in_leaderships_cloud_capacity(login, multi_node_flex):
    task = two_by_two()
    lifecycle.place_many([(task, Pool.objects.get(name="cloud-h100"))], timezone.now())
    cloud = rows(login("cio"), "/leadership/", "cloud")
    assert row(cloud, "Pool", "cloud-h100")["In use"] == "4.000"


def test_a_two_node_task_counts_four_for_its_member_its_team_and_its_department(login, multi_node_flex):
    two_by_two()
    run_pass()
    team = login("lead-pretraining")
    assert row(rows(team, "/teams/pretraining/", "members"), "Member", "dev-pretraining")["GPUs in use"] == (
        "4.000"
    )
    assert "4 GPUs of a 48 GPU reservation" in team.get("/teams/pretraining/").content.decode()
    teams = rows(login("head-language"), "/departments/language/", "teams")
    assert row(teams, "Group", "Pretraining")["In use"] == "4.000"


def test_borrowed_capacity_counts_gpus_times_nodes(login, multi_node_flex):
    # Ranking reserves 16: a 4 x 4 task fills the reservation, a 2 x 2 one placed after it borrows 4.
    first = submit("dev-ranking", "ranking/gpu-flex", gpus="4", nodes=4)
    run_pass()
    second = two_by_two("dev-ranking", "ranking/gpu-flex")
    run_pass()
    borrowed = selectors.borrowed_gpus()
    assert (borrowed[first.pk], borrowed[second.pk]) == (0, 4)
    assert row(rows(login("it"), "/it/", "pools"), "Pool", "onprem-k8s")["Borrowed"] == "4.000"
    detail = login("dev-ranking").get(f"/work/tasks/{second.pk}/").content.decode()
    assert "4 GPUs on borrowed capacity" in detail


def test_a_multi_node_task_shows_as_nodes_times_gpus_in_the_work_table_and_its_page(login, multi_node_flex):
    task = two_by_two(name="multi")
    single = submit("dev-pretraining", "pretraining/gpu-flex", gpus="2", name="single")
    client = login("dev-pretraining")
    mine = rows(client, "/work/", "tasks")
    assert (row(mine, "Name", "multi")["GPUs"], row(mine, "Name", "single")["GPUs"]) == ("2 x 2.000", "2.000")
    detail = client.get(f"/work/tasks/{task.pk}/").content.decode()
    assert "pretraining/gpu-flex (2 x 2 GPUs: 4 counted)" in detail
    assert "(2 GPUs)" in client.get(f"/work/tasks/{single.pk}/").content.decode()


def test_the_submit_form_takes_nodes(login, multi_node_flex):
    client = login("dev-pretraining")
    form = {"compute_resource": _resource_id("pretraining/gpu-flex"), "command": "torchrun train.py"}
    response = client.post("/work/", form | {"gpus": "2", "nodes": "2", "name": "multi"})
    assert response.status_code == 302
    task = Task.objects.get(name="multi")
    assert (task.gpus, task.nodes, task.counted_gpus) == (Decimal(2), 2, Decimal(4))
    assert client.post("/work/", form | {"gpus": "2", "name": "one"}).status_code == 302
    assert Task.objects.get(name="one").nodes == 1


@pytest.mark.parametrize(
    "resource, data, message",
    [
        ("pretraining/gpu-flex", {"gpus": "2", "nodes": "0"}, "Nodes: Ensure this value is greater than"),
        ("pretraining/gpu-flex", {"gpus": "2", "nodes": "65"}, "Nodes: Ensure this value is less than"),
        ("pretraining/gpu-flex", {"gpus": "2", "nodes": "1e1"}, "Nodes: Enter a whole number."),
        ("pretraining/cpu-only", {"nodes": "2"}, "Nodes: A task on several nodes needs GPUs"),
        ("pretraining/gpu-flex", {"gpus": "8", "nodes": "21"}, "Nodes: GPUs x nodes (8 x 21 = 168) exceed"),
    ],
)
def test_a_refused_number_of_nodes_is_shown_on_the_nodes_field(
    login, multi_node_flex, resource, data, message
):
    form = {"compute_resource": _resource_id(resource), "command": "torchrun train.py"} | data
    response = login("dev-pretraining").post("/work/", form)
    assert response.status_code == 400
    assert message in response.content.decode().replace("&#x27;", "'")
    assert not Task.objects.exists()


def test_nodes_on_a_profile_with_a_single_node_pool_are_refused_on_the_nodes_field(login, multi_node_flex):
    Pool.objects.filter(name="baremetal").update(multi_node=False)
    form = {"compute_resource": _resource_id("pretraining/gpu-flex"), "command": "x"}
    form |= {"gpus": "2", "nodes": "2"}
    response = login("dev-pretraining").post("/work/", form)
    assert response.status_code == 400
    assert (
        "Nodes: Profile gpu-flex has pools that run no multi-node work (baremetal), "
        "so a task there runs on one node." in response.content.decode()
    )
    assert not Task.objects.exists()


def _resource_id(name: str) -> int:
    from apps.policies.models import ComputeResource

    return ComputeResource.objects.get(name=name).pk
