"""Node cost: node-hours priced per instance type and market, the idle part (alive, holding no
task) exact to the second, and the part each group's usage pays. Real rows: nodes, workers with the
node's hostname, tasks they claimed and the usage intervals of those tasks."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from apps.cloud.costs import cloud_spend
from apps.cloud.models import CloudNode, CloudPool, InstanceType
from apps.pools.models import Worker
from apps.pricing import services as pricing
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from tests.factories import WorkerFactory
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

SPOT, ON_DEMAND = CloudNode.Market.SPOT, CloudNode.Market.ON_DEMAND
DAY = datetime(2026, 4, 1, tzinfo=UTC)
MONTH = (DAY, datetime(2026, 5, 1, tzinfo=UTC))


def at(hour: int, minute: int = 0, second: int = 0, day: int = 1) -> datetime:
    return datetime(2026, 4, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def estate():
    return make_estate()


@pytest.fixture
def h100x8(estate):
    cloud_pool = CloudPool.objects.create(pool=estate.cloud, provider="local", settings={})
    return InstanceType.objects.create(cloud_pool=cloud_pool, name="p5.48xlarge", gpus=8, max_count=4)


def node(instance_type, name, launched, terminated=None, market=ON_DEMAND) -> CloudNode:
    return CloudNode.objects.create(
        cloud_pool=instance_type.cloud_pool,
        instance_type=instance_type,
        market=market,
        name=name,
        state=CloudNode.State.TERMINATED if terminated else CloudNode.State.READY,
        launched_at=launched,
        terminated_at=terminated,
    )


def worker_of(cloud_node: CloudNode, **fields) -> Worker:
    return WorkerFactory(pool=cloud_node.cloud_pool.pool, hostname=cloud_node.name, **fields)


def held(estate, worker, group, start, end=None, gpus="8"):
    """A task the worker claimed, with its usage interval naming the worker."""
    user = estate.users["alice"]
    task = Task.objects.create(
        user=user,
        compute_resource=estate.resources[group.slug],
        gpus=Decimal(gpus),
        command="train",
        pool=worker.pool,
        worker=worker,
    )
    return record(estate, group, user, worker.pool, start, end, gpus=gpus, task=task)


def price(market, amount, day=date(2026, 1, 1), currency="EUR", name="p5.48xlarge"):
    pricing.create_node_price(
        instance_type=name,
        market=market,
        per_node_hour=Decimal(amount),
        effective_from=day,
        currency=currency,
        via="system",
    )


def test_idle_is_the_nodes_life_without_a_task_exact_to_the_second(estate, h100x8):
    price(ON_DEMAND, "10")
    n = node(h100x8, "burst-1", at(10), at(14))
    # The task was placed while the node booted: its interval is clipped to the node's life.
    held(estate, worker_of(n), estate.team_a, at(9, 50), at(12, 0, 30))
    spend = cloud_spend(*MONTH, "EUR")
    (cost,) = spend.nodes
    assert (cost.start, cost.end, cost.hours) == (at(10), at(14), Decimal("4.000"))
    assert cost.idle_seconds == Decimal(2 * 3600 - 30)  # 12:00:30 to 14:00
    assert cost.idle_hours == Decimal("1.992")
    assert (cost.per_node_hour, cost.cost, cost.idle_cost) == (
        Decimal("10.0000"),
        Decimal("40.00"),
        Decimal("19.92"),
    )
    assert spend.total == Decimal("40.00") and spend.idle == Decimal("19.92")
    assert spend.by_group == {estate.team_a.pk: Decimal("20.08")}
    assert spend.spare == Decimal("0.00")


def test_two_groups_sharing_a_node_pay_their_gpus_share_and_the_rest_is_spare(estate, h100x8):
    price(ON_DEMAND, "8")
    n = node(h100x8, "burst-1", at(10), at(14))
    w = worker_of(n)
    held(estate, w, estate.team_a, at(10), at(12), gpus="4")
    held(estate, w, estate.team_b, at(11), at(13), gpus="2")
    spend = cloud_spend(*MONTH, "EUR")
    assert spend.total == Decimal("32.00")
    assert spend.idle == Decimal("8.00")  # 13:00 to 14:00
    assert spend.by_group == {estate.team_a.pk: Decimal("8.00"), estate.team_b.pk: Decimal("4.00")}
    # 10-11: 4 of 8 GPUs unused, 11-12: 2, 12-13: 6, at 1 per GPU-hour.
    assert spend.spare == Decimal("12.00")
    assert spend.total == spend.idle + spend.attributed + spend.spare


def test_a_price_change_inside_the_range_splits_the_cost_at_midnight_utc(estate, h100x8):
    price(SPOT, "2", date(2026, 4, 1))
    price(SPOT, "3", date(2026, 4, 2))
    price(ON_DEMAND, "100", date(2026, 4, 1))  # another market: not this node's price
    node(h100x8, "burst-1", at(22), at(2, day=2), market=SPOT)
    spend = cloud_spend(*MONTH, "EUR")
    (cost,) = spend.nodes
    assert cost.cost == Decimal("10.00")  # 2 h at 2, 2 h at 3
    assert cost.per_node_hour == Decimal("2.5000")  # time-weighted
    assert spend.idle == Decimal("10.00") and spend.by_group == {}
    assert spend.lines[0].market == SPOT and spend.lines[0].cost == Decimal("10.00")


def test_a_currency_without_a_price_leaves_the_node_hours_unpriced(estate, h100x8):
    price(ON_DEMAND, "10")
    n = node(h100x8, "burst-1", at(10), at(14))
    held(estate, worker_of(n), estate.team_a, at(10), at(11))
    spend = cloud_spend(*MONTH, "USD")
    (cost,) = spend.nodes
    assert (cost.per_node_hour, cost.cost, cost.idle_cost) == (None, None, None)
    assert cost.hours == Decimal("4.000") and cost.idle_hours == Decimal("3.000")
    assert spend.total == Decimal("0.00") and spend.unpriced_node_hours == Decimal("4.000")


def test_a_price_starting_inside_the_nodes_life_leaves_the_hours_before_it_unpriced(estate, h100x8):
    price(ON_DEMAND, "10", date(2026, 4, 2))
    node(h100x8, "burst-1", at(22), at(2, day=2))
    spend = cloud_spend(*MONTH, "EUR")
    (cost,) = spend.nodes
    assert cost.cost == Decimal("20.00") and cost.per_node_hour is None
    assert spend.unpriced_node_hours == Decimal("2.000")


def test_a_node_still_alive_costs_until_now_and_its_running_task_holds_it(estate, h100x8):
    price(ON_DEMAND, "10")
    now = at(12, 30)
    n = node(h100x8, "burst-1", at(10))
    held(estate, worker_of(n), estate.team_a, at(11))  # still running
    spend = cloud_spend(*MONTH, "EUR", now=now)
    (cost,) = spend.nodes
    assert cost.end == now and cost.hours == Decimal("2.500") and cost.idle_hours == Decimal("1.000")
    assert spend.total == Decimal("25.00") and spend.by_group == {estate.team_a.pk: Decimal("15.00")}


def test_the_range_clips_a_node_and_leaves_out_nodes_outside_it(estate, h100x8):
    price(ON_DEMAND, "10")
    node(h100x8, "before", at(1), at(3))
    node(h100x8, "across", at(5), at(9))
    node(h100x8, "after", at(12), at(13))
    spend = cloud_spend(at(6), at(8), "EUR")
    assert [(c.node, c.start, c.end, c.cost) for c in spend.nodes] == [
        ("across", at(6), at(8), Decimal("20.00"))
    ]


def test_a_re_enrolled_worker_of_the_node_still_counts_and_another_pools_host_does_not(estate, h100x8):
    price(ON_DEMAND, "10")
    n = node(h100x8, "burst-1", at(10), at(14))
    old = worker_of(n, state=Worker.State.RETIRED)
    new = worker_of(n)
    held(estate, old, estate.team_a, at(10), at(11))
    held(estate, new, estate.team_b, at(12), at(13))
    stranger = WorkerFactory(pool=estate.onprem, hostname="burst-1")
    held(estate, stranger, estate.team_c, at(10), at(14))
    spend = cloud_spend(*MONTH, "EUR")
    assert spend.idle == Decimal("20.00")
    assert spend.by_group == {estate.team_a.pk: Decimal("10.00"), estate.team_b.pk: Decimal("10.00")}


def test_lines_sum_nodes_per_pool_instance_type_and_market(estate, h100x8):
    price(ON_DEMAND, "10")
    price(SPOT, "4")
    node(h100x8, "a", at(10), at(11))
    node(h100x8, "b", at(10), at(12))
    node(h100x8, "c", at(10), at(13), market=SPOT)
    spend = cloud_spend(*MONTH, "EUR")
    assert [(line.market, line.nodes, line.hours, line.cost) for line in spend.lines] == [
        (ON_DEMAND, 2, Decimal("3.000"), Decimal("30.00")),
        (SPOT, 1, Decimal("3.000"), Decimal("12.00")),
    ]
    assert spend.total == Decimal("42.00") and spend.idle_share == Decimal("100.0")


def test_the_spend_reads_in_a_few_queries_however_many_nodes(estate, h100x8, django_assert_max_num_queries):
    price(ON_DEMAND, "10")
    for i in range(12):
        n = node(h100x8, f"burst-{i}", at(10) + timedelta(minutes=i), at(14))
        held(estate, worker_of(n), estate.team_a, at(11), at(12))
    with django_assert_max_num_queries(4):
        spend = cloud_spend(*MONTH, "EUR")
    assert len(spend.nodes) == 12 and spend.by_group == {estate.team_a.pk: Decimal("120.00")}


def ran(task, worker, start, end):
    """The lifecycle's own steps: the task placed on the worker's pool, claimed by the worker, then
    its worker lost and the task requeued (which clears ``Task.worker``)."""
    lifecycle.place_many([(task, worker.pool)], start)
    task.refresh_from_db()
    lifecycle.claim_many(worker, [task], start)
    task.refresh_from_db()
    lifecycle.requeue_lost([task], "worker lost", end, ended_at=end)
    task.refresh_from_db()


def waiting(estate, group, gpus="8"):
    return Task.objects.create(
        user=estate.users["alice"],
        compute_resource=estate.resources[group.slug],
        gpus=Decimal(gpus),
        command="train",
    )


def test_a_node_that_ran_a_task_later_requeued_is_busy_and_the_group_pays_for_it(estate, h100x8):
    """A node ran a task 10:00-12:00 and was lost; the task went back to its queue. The node was
    busy those two hours and Pretraining pays for them: the interval keeps the worker that claimed
    it."""
    price(ON_DEMAND, "10")
    n = node(h100x8, "burst-1", at(10), at(12))
    task = waiting(estate, estate.team_a)
    ran(task, worker_of(n), at(10), at(12))
    assert task.state == Task.State.QUEUED and task.worker_id is None
    spend = cloud_spend(*MONTH, "EUR")
    assert (spend.total, spend.idle) == (Decimal("20.00"), Decimal("0.00"))
    assert spend.by_group == {estate.team_a.pk: Decimal("20.00")}


def test_a_task_that_moved_from_one_node_to_another_keeps_each_nodes_busy_time(estate, h100x8):
    """Node A ran the task 10-11, then it was requeued and node B ran it 12-13: A is busy 10-11
    and idle 11-12, B busy 12-13 and idle 13-14."""
    price(ON_DEMAND, "10")
    a = node(h100x8, "burst-a", at(10), at(12))
    b = node(h100x8, "burst-b", at(12), at(14))
    task = waiting(estate, estate.team_a)
    ran(task, worker_of(a), at(10), at(11))
    ran(task, worker_of(b), at(12), at(13))
    spend = cloud_spend(*MONTH, "EUR")
    assert spend.total == Decimal("40.00")
    assert {c.node: c.idle_hours for c in spend.nodes} == {
        "burst-a": Decimal("1.000"),
        "burst-b": Decimal("1.000"),
    }
    assert spend.by_group == {estate.team_a.pk: Decimal("20.00")}


def test_a_business_units_cap_counts_the_cloud_work_of_its_tasks_that_were_requeued(estate, h100x8):
    """Research's task ran 2 h on a cloud node (20 EUR), then the node was lost and the task
    requeued: Research's cap of 15 EUR is reached."""
    from apps.cloud import services as cloud
    from apps.cloud.caps import cap_statuses

    price(ON_DEMAND, "10")
    n = node(h100x8, "burst-1", at(10), at(12))
    ran(waiting(estate, estate.team_a), worker_of(n), at(10), at(12))
    cloud.set_cap(estate.bu, Decimal(15), "EUR", actor=None, via="api")
    (status,) = cap_statuses(at(13))
    assert (status.spent, status.reached) == (Decimal("20.00"), True)


def test_a_claim_names_its_worker_on_the_open_interval_only(estate, h100x8):
    """The claim writes the worker on the task's open interval; an earlier closed interval keeps
    the worker of its own claim."""
    from apps.ledger.models import UsageInterval

    a, b = worker_of(node(h100x8, "burst-a", at(10))), worker_of(node(h100x8, "burst-b", at(10)))
    task = waiting(estate, estate.team_a)
    ran(task, a, at(10), at(11))
    lifecycle.place_many([(task, estate.cloud)], at(12))
    task.refresh_from_db()
    assert list(
        UsageInterval.objects.filter(task=task).order_by("start").values_list("worker_id", flat=True)
    ) == [
        a.pk,
        None,
    ]
    lifecycle.claim_many(b, [task], at(12))
    assert list(
        UsageInterval.objects.filter(task=task).order_by("start").values_list("worker_id", flat=True)
    ) == [
        a.pk,
        b.pk,
    ]


def test_the_migration_names_the_worker_of_existing_intervals_from_their_claims(estate, h100x8):
    """Intervals recorded before intervals named their worker take it from the task's claim
    events: each interval the worker whose claim falls inside it."""
    import importlib

    from django.apps import apps

    from apps.ledger.models import UsageInterval

    migration = importlib.import_module("apps.ledger.migrations.0003_interval_worker")
    a, b = worker_of(node(h100x8, "burst-a", at(10))), worker_of(node(h100x8, "burst-b", at(10)))
    task = waiting(estate, estate.team_a)
    ran(task, a, at(10), at(11))
    ran(task, b, at(12), at(13))
    never = waiting(estate, estate.team_b)
    lifecycle.place_many([(never, estate.cloud)], at(14))
    UsageInterval.objects.update(worker=None)
    migration.from_claims(apps, None)
    rows = UsageInterval.objects.order_by("start").values_list("task_id", "worker_id")
    assert list(rows) == [(task.pk, a.pk), (task.pk, b.pk), (never.pk, None)]


def test_the_spare_part_is_never_negative_when_groups_fill_a_node(estate, h100x8):
    """Three groups fill an 8-GPU node (3 + 3 + 2 GPUs) for one hour at 0.10 a node-hour: their
    exact parts (0.0375, 0.0375, 0.025) rounded one by one would make 0.11, above the total. They
    are rounded together (largest remainder) to the 0.10 they hold exactly."""
    price(ON_DEMAND, "0.10")
    n = node(h100x8, "burst-1", at(10), at(11))
    w = worker_of(n)
    held(estate, w, estate.team_a, at(10), at(11), gpus="3")
    held(estate, w, estate.team_b, at(10), at(11), gpus="3")
    held(estate, w, estate.team_c, at(10), at(11), gpus="2")
    spend = cloud_spend(*MONTH, "EUR")
    assert (spend.total, spend.idle, spend.attributed, spend.spare) == (
        Decimal("0.10"),
        Decimal("0.00"),
        Decimal("0.10"),
        Decimal("0.00"),
    )
    assert spend.by_group == {
        estate.team_a.pk: Decimal("0.04"),
        estate.team_b.pk: Decimal("0.04"),
        estate.team_c.pk: Decimal("0.02"),
    }


def test_the_groups_parts_never_exceed_the_total_less_the_idle_part(estate, h100x8):
    """Each rounding alone is half up; the idle part and the groups' parts rounded up together
    would pass the total. Attributed is capped at total - idle, so the spare part is 0, not -0.01."""
    price(ON_DEMAND, "0.09")
    n = node(h100x8, "burst-1", at(10), at(11))
    held(estate, worker_of(n), estate.team_a, at(10), at(10, 50))  # 0.075 held, 0.015 idle
    spend = cloud_spend(*MONTH, "EUR")
    assert (spend.total, spend.idle) == (Decimal("0.09"), Decimal("0.02"))
    assert spend.by_group == {estate.team_a.pk: Decimal("0.07")} and spend.spare == Decimal("0.00")


def test_the_idle_share_rounds_half_up_like_the_exported_share(estate, h100x8):
    """Total 16.00, idle 1.00: 6.25 %, 6.3 on the page as in the CSV (the ledger rounds half up)."""
    from apps.cloud.selectors import cloud_part_records

    price(ON_DEMAND, "1")
    n = node(h100x8, "burst-1", at(0), at(16))
    held(estate, worker_of(n), estate.team_a, at(0), at(15))
    spend = cloud_spend(*MONTH, "EUR")
    assert (spend.total, spend.idle) == (Decimal("16.00"), Decimal("1.00"))
    exported = {row["part"]: row["share"] for row in cloud_part_records(spend)}
    assert exported["Idle (nodes holding no task)"] == spend.idle_share == Decimal("6.3")


def test_renaming_an_instance_type_in_the_admin_leaves_past_node_cost_unchanged(client, estate, h100x8):
    """April: a p5.48xlarge node 10:00-14:00 at 10 a node-hour = 40 EUR, with a 4-GPU task. In May
    IT edits the pool's instance type in the admin to p4d.24xlarge with 4 GPUs. April's node keeps
    the name and GPUs it was launched with: still 40 EUR, and the task still held half of it."""
    from django.urls import reverse

    from tests.factories import UserFactory

    price(ON_DEMAND, "10")
    n = node(h100x8, "burst-1", at(10), at(14))
    held(estate, worker_of(n), estate.team_a, at(10), at(14), gpus="4")
    cloud_pool = h100x8.cloud_pool
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    data = {
        "pool": cloud_pool.pool_id,
        "provider": "local",
        "settings": '{"folder": "/tmp/klique-test-nodes"}',
        "enabled": "on",
        "boot_timeout_s": cloud_pool.boot_timeout_s,
        "idle_timeout_s": cloud_pool.idle_timeout_s,
        "spot_timeout_s": cloud_pool.spot_timeout_s,
        "instance_types-TOTAL_FORMS": "1",
        "instance_types-INITIAL_FORMS": "1",
        "instance_types-MIN_NUM_FORMS": "0",
        "instance_types-MAX_NUM_FORMS": "1000",
        "instance_types-0-id": h100x8.pk,
        "instance_types-0-cloud_pool": cloud_pool.pk,
        "instance_types-0-rank": "0",
        "instance_types-0-name": "p4d.24xlarge",
        "instance_types-0-gpus": "4",
        "instance_types-0-max_count": "4",
    }
    response = client.post(reverse("admin:cloud_cloudpool_change", args=[cloud_pool.pk]), data)
    assert response.status_code == 302
    h100x8.refresh_from_db()
    assert (h100x8.name, h100x8.gpus) == ("p4d.24xlarge", 4)
    spend = cloud_spend(*MONTH, "EUR")
    assert spend.total == Decimal("40.00") and spend.by_group == {estate.team_a.pk: Decimal("20.00")}
    assert [(line.instance_type, line.cost) for line in spend.lines] == [("p5.48xlarge", Decimal("40.00"))]


def test_a_node_keeps_the_type_it_was_launched_as_and_follows_a_fallback_before_launch(estate, h100x8):
    """A node is created with its type's name and GPUs; moved to another type before its launch (the
    autoscaler's fallback saves ``instance_type`` alone) it takes that type's; editing a type later
    changes no node."""
    smaller = InstanceType.objects.create(cloud_pool=h100x8.cloud_pool, name="p4d.24xlarge", gpus=4, rank=1)
    n = node(h100x8, "burst-1", at(10))
    assert (n.instance_type_name, n.gpus) == ("p5.48xlarge", 8)
    n.instance_type = smaller
    n.save(update_fields=["instance_type"])
    n.refresh_from_db()
    assert (n.instance_type_name, n.gpus) == ("p4d.24xlarge", 4)
    InstanceType.objects.filter(pk=smaller.pk).update(name="g5.xlarge", gpus=1)
    smaller.refresh_from_db()
    n.instance_type = smaller
    n.save()
    n.refresh_from_db()
    assert (n.instance_type_name, n.gpus) == ("p4d.24xlarge", 4)
