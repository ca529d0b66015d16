"""Reservations as measured guarantees: the worked example of docs/ledger.md, in the pure core
(``apps.tasks.guarantees``) and read from the database (``apps.tasks.guarantee_selectors``)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.tasks import guarantees
from apps.tasks.guarantee_selectors import group_guarantee
from apps.tasks.models import Task, TaskEvent
from tests.ledger.ledger_data import make_estate, record

T = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
PERIOD = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))


def s(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


# (name, GPUs, [(kind, at, reason)], [(placed, ended)]) of the team "pretraining", reservation 4 GPUs.
EXAMPLE = [
    ("a", "2", [("submitted", s(0), ""), ("started", s(60), "")], [(s(30), s(900))]),
    (
        "b",
        "1",
        [
            ("submitted", s(10), ""),
            ("verdict", s(10), "no_capacity"),
            ("verdict", s(200), "reclaim_held"),
            ("started", s(330), ""),
        ],
        [(s(300), None)],
    ),
    ("c", "1", [("submitted", s(20), ""), ("started", s(400), "")], [(s(40), s(950))]),
    ("d", "1", [("submitted", s(50), ""), ("started", s(320), "")], [(s(310), s(990))]),
    (
        "e",
        "1",
        [
            ("submitted", s(1000), ""),
            ("started", s(1090), ""),
            ("preempted", s(2000), "reclaim"),
            ("requeued", s(2000), "reclaim"),
            ("started", s(2100), ""),
        ],
        [(s(1000), s(2000)), (s(2045), s(3000))],
    ),
    (
        "f",
        "1",
        [
            ("submitted", PERIOD[0] - timedelta(seconds=60), ""),
            ("started", PERIOD[0] + timedelta(seconds=30), ""),
        ],
        [(PERIOD[0] - timedelta(seconds=30), PERIOD[0] + timedelta(hours=1))],
    ),
    (
        "g",
        "1",
        [("submitted", PERIOD[0] - timedelta(hours=2), ""), ("started", PERIOD[0] - timedelta(hours=1), "")],
        [(PERIOD[0] - timedelta(hours=2), PERIOD[0] - timedelta(minutes=30))],
    ),
    ("h", "1", [("submitted", s(5000), ""), ("canceled", s(5100), "")], [(s(5010), s(5100))]),
]


def test_guarantee_core_pairs_each_placement_with_its_queue_entry_start_and_last_wait_reason():
    placements = [
        guarantees.Placement(1, s(30), Decimal(2), Decimal(0)),
        guarantees.Placement(2, s(300), Decimal(2), Decimal(2)),
        guarantees.Placement(3, s(40), Decimal(1), Decimal(2)),
        guarantees.Placement(4, s(310), Decimal(1), Decimal(5)),
    ]
    events = [
        guarantees.Event(1, s(0), "submitted"),
        guarantees.Event(1, s(60), "started"),
        guarantees.Event(2, s(10), "submitted"),
        guarantees.Event(2, s(10), "verdict", "no_capacity"),
        guarantees.Event(2, s(200), "verdict", "reclaim_held"),
        guarantees.Event(2, s(330), "started"),
        guarantees.Event(3, s(20), "submitted"),
        guarantees.Event(3, s(400), "started"),
        guarantees.Event(4, s(50), "submitted"),
        guarantees.Event(4, s(320), "started"),
    ]
    runs = guarantees.runs(placements, events, Decimal(4))
    assert [(r.task, r.wait_s, r.within, r.cause) for r in runs] == [
        (1, 60, True, "start"),
        (2, 320, True, "reclaim_held"),
        (3, 380, True, "start"),
        (4, 270, False, "unknown"),
    ]
    result = guarantees.measure(runs)
    assert (result.count, result.kept, result.share, result.p50_s, result.p95_s) == (
        3,
        1,
        Decimal(1) / 3,
        320,
        380,
    )
    assert [(m.task, m.wait_s, m.cause) for m in result.misses] == [
        (2, 320, "reclaim_held"),
        (3, 380, "start"),
    ]


def test_guarantee_core_work_never_placed_is_a_miss_when_waiting_past_n_with_room_in_the_reservation():
    waiting = [
        guarantees.Waiting(10, s(0), Decimal(1), "no_capacity"),  # 600 s, room: a miss
        guarantees.Waiting(11, s(500), Decimal(1), "no_capacity"),  # 100 s: not yet
        guarantees.Waiting(12, s(0), Decimal(2), "limit"),  # 3 + 2 > 4: no room, not the reservation's
        guarantees.Waiting(13, s(100), Decimal(1)),  # 500 s, no reason recorded
    ]
    misses = guarantees.waiting_misses(waiting, Decimal(3), Decimal(4), s(600), 120)
    assert [(m.task, m.wait_s, m.cause, m.waiting) for m in misses] == [
        (10, 600, "no_capacity", True),
        (13, 500, "unknown", True),
    ]
    run = guarantees.Run(1, s(0), s(10), s(30), True, "start")
    figures = guarantees.measure([run], 120, misses)
    assert (figures.count, figures.kept, figures.p50_s, figures.p95_s) == (3, 1, 30, 30)
    assert [m.task for m in figures.misses] == [10, 13]


def test_guarantee_core_combine_sums_runs_and_takes_percentiles_over_every_wait():
    first = guarantees.measure([guarantees.Run(1, s(0), s(0), s(w), True, "") for w in (10, 20, 200)], 120)
    second = guarantees.measure([guarantees.Run(2, s(0), s(0), s(w), True, "") for w in (30, 40)], 60)
    both = guarantees.combine([first, second])
    assert (both.count, both.kept, both.start_s) == (5, 4, 120)
    assert (both.p50_s, both.p95_s) == (30, 200)
    assert [m.task for m in both.misses] == [1]
    assert guarantees.combine([]).count == 0


def test_guarantee_core_nearest_rank_percentiles_and_no_runs():
    assert guarantees.percentile([], 50) is None
    assert guarantees.percentile([5, 1, 3, 2, 4], 50) == 3
    assert guarantees.percentile(list(range(1, 21)), 95) == 19
    assert guarantees.percentile([7], 95) == 7
    empty = guarantees.measure([])
    assert (empty.count, empty.share, empty.p50_s, empty.misses) == (0, None, None, ())


def test_guarantee_core_a_placement_never_started_or_requeued_before_its_start_is_not_measured():
    placements = [guarantees.Placement(1, s(10), Decimal(1), Decimal(0))]
    events = [
        guarantees.Event(1, s(0), "submitted"),
        guarantees.Event(1, s(20), "requeued"),
        guarantees.Event(1, s(30), "started"),
    ]
    assert guarantees.runs(placements, events, Decimal(4)) == []


def _write_example(estate):
    team, alice = estate.team_a, estate.users["alice"]
    policy = estate.resources[team.slug].policy
    policy.reservation = Decimal(4)
    policy.save(update_fields=["reservation"])
    tasks = {}
    for name, gpus, events, placements in EXAMPLE:
        first = None
        for placed, ended in placements:
            interval = record(estate, team, alice, estate.onprem, placed, ended, gpus=gpus, task=first)
            first = interval.task
        first.name = name
        first.state = (
            Task.State.RUNNING
            if placements[-1][1] is None
            else Task.State.CANCELED
            if events[-1][0] == "canceled"
            else Task.State.SUCCEEDED
        )
        first.save(update_fields=["name", "state"])
        tasks[name] = first
        TaskEvent.objects.bulk_create(
            TaskEvent(task=first, at=at, kind=kind, reason=reason) for kind, at, reason in events
        )
    return policy, tasks


@pytest.mark.django_db
def test_guarantee_read_from_the_ledger_counts_only_placements_within_the_reservation(
    django_assert_num_queries,
):
    policy, tasks = _write_example(make_estate())
    policy.refresh_from_db()
    assert policy.guarantee_start_s == 120
    with django_assert_num_queries(3):
        result = group_guarantee(policy, *PERIOD)
    assert (result.count, result.kept, result.share) == (6, 4, Decimal(2) / 3)
    assert (result.p50_s, result.p95_s) == (90, 380)
    assert [(m.task, m.wait_s, m.cause) for m in result.misses] == [
        (tasks["b"].pk, 320, "reclaim_held"),
        (tasks["c"].pk, 380, "start"),
    ]


@pytest.mark.django_db
def test_guarantee_judges_each_run_by_the_reservation_in_force_when_it_was_placed():
    from apps.policies.models import PolicyChange

    policy, tasks = _write_example(make_estate())
    PolicyChange.objects.create(
        policy=policy, at=s(500), via="admin", changes={"reservation": ["2.000", "4.000"]}
    )
    PolicyChange.objects.create(policy=policy, at=s(400), via="admin", changes={"limit": ["8.000", "16.000"]})
    result = group_guarantee(policy, *PERIOD)
    # 2 GPUs until T+500 s: a (2 GPUs, nothing held) and f fit; b and c (a held) no longer do.
    assert (result.count, result.kept, result.misses) == (4, 4, ())
    assert sorted(result.waits) == [60, 90, 90, 100]
    assert guarantees.reservation_at(Decimal(4), [(s(500), Decimal(2))], s(499)) == 2
    assert guarantees.reservation_at(Decimal(4), [(s(500), Decimal(2))], s(500)) == 4


@pytest.mark.django_db
def test_guarantee_start_s_per_policy_sets_what_counts_as_on_time():
    policy, _ = _write_example(make_estate())
    policy.guarantee_start_s = 330
    result = group_guarantee(policy, *PERIOD)
    assert (result.count, result.kept, [m.cause for m in result.misses]) == (6, 5, ["start"])


@pytest.mark.django_db
def test_guarantee_on_the_team_and_department_pages_and_the_api_for_who_sees_the_group(client, monkeypatch):
    estate = make_estate()
    _, tasks = _write_example(estate)
    monkeypatch.setattr("django.utils.timezone.now", lambda: T + timedelta(days=1))
    client.force_login(estate.users["lead"])
    page = client.get(f"/teams/{estate.team_a.slug}/").content.decode()
    assert 'id="guarantee-table"' in page
    assert "<td>6</td><td>2 min</td><td>67 %</td><td>90 s</td><td>6 min</td>" in page
    assert f">task {tasks['b'].pk}</a>: 5 min, reclaim held<br>" in page
    assert f">task {tasks['c'].pk}</a>: 6 min, placed in time, started late" in page
    client.force_login(estate.users["head"])
    page = client.get(f"/departments/{estate.dept.slug}/").content.decode()
    assert "<td>Pretraining</td><td>6</td><td>2 min</td><td>67 %</td>" in page
    assert "<td>Alignment</td><td>0</td><td>2 min</td>" in page
    answer = client.get(f"/api/v1/groups/{estate.team_a.slug}/guarantee/?period=2026-11").json()
    assert (answer["count"], answer["kept"], answer["share"], answer["p50_s"], answer["p95_s"]) == (
        6,
        4,
        "0.6667",
        90.0,
        380.0,
    )
    assert [(m["task"], m["wait_s"], m["cause"]) for m in answer["misses"]] == [
        (tasks["b"].pk, 320.0, "reclaim_held"),
        (tasks["c"].pk, 380.0, "start"),
    ]
    assert client.get(f"/api/v1/groups/{estate.team_a.slug}/guarantee/?period=soon").status_code == 400
    client.force_login(estate.users["carol"])
    assert client.get(f"/api/v1/groups/{estate.team_a.slug}/guarantee/").status_code == 404


@pytest.mark.django_db
def test_guarantee_of_the_current_period_counts_work_still_waiting_past_n_as_a_miss(monkeypatch):
    estate = make_estate()
    policy, tasks = _write_example(estate)
    alice = estate.users["alice"]
    resource = estate.resources[estate.team_a.slug]
    now = s(6000)
    monkeypatch.setattr("django.utils.timezone.now", lambda: now)
    waiting = Task.objects.create(
        user=alice,
        compute_resource=resource,
        gpus=Decimal(1),
        command="train",
        verdict={"rule": "no_capacity"},
    )
    TaskEvent.objects.create(task=waiting, at=s(5600), kind="submitted")
    fresh = Task.objects.create(user=alice, compute_resource=resource, gpus=Decimal(1), command="train")
    TaskEvent.objects.create(task=fresh, at=s(5950), kind="submitted")
    big = Task.objects.create(user=alice, compute_resource=resource, gpus=Decimal(4), command="train")
    TaskEvent.objects.create(task=big, at=s(5000), kind="submitted")
    nodes = Task.objects.create(user=alice, compute_resource=resource, gpus=Decimal(2), nodes=2, command="x")
    TaskEvent.objects.create(task=nodes, at=s(5000), kind="submitted")
    old = Task.objects.create(user=alice, compute_resource=resource, gpus=Decimal(1), command="train")
    TaskEvent.objects.create(task=old, at=PERIOD[0] - timedelta(hours=1), kind="submitted")
    result = group_guarantee(policy, *PERIOD)
    # b still holds 1 GPU: the 1-GPU tasks had room (misses: one waiting 400 s, one since before the
    # month began); the 4-GPU one and the 2 x 2-GPU one never had room.
    assert (result.count, result.kept) == (8, 4)
    assert (result.p50_s, result.p95_s) == (90, 380)
    assert [(m.task, m.wait_s, m.cause, m.waiting) for m in result.misses][-1] == (
        waiting.pk,
        400,
        "no_capacity",
        True,
    )
    assert [(m.task, m.waiting) for m in result.misses][0] == (old.pk, True)
    past = group_guarantee(policy, PERIOD[0] - timedelta(days=30), PERIOD[0])
    assert not any(m.waiting for m in past.misses)


@pytest.mark.django_db
def test_guarantee_on_the_leadership_view_per_business_unit_and_in_the_metrics(client, settings, monkeypatch):
    from tests.engine_live.test_meter_and_metrics import scrape

    estate = make_estate()
    _, tasks = _write_example(estate)
    monkeypatch.setattr("django.utils.timezone.now", lambda: T + timedelta(days=1))
    client.force_login(estate.users["cio"])
    page = client.get("/leadership/").content.decode()
    assert 'id="guarantee-table"' in page
    assert (
        f"<td>{estate.bu.name}</td><td>6</td><td>2 min</td><td>67 %</td><td>90 s</td><td>6 min</td>" in page
    )
    monkeypatch.setattr("django.utils.timezone.now", lambda: s(3000))
    metrics = scrape(client, settings)
    policy = (("policy", estate.team_a.slug),)
    # The hour before s(3000) holds five of the worked example's six runs (not f's, on the 1st).
    assert metrics[("klique_reservation_runs", policy)] == 5
    assert metrics[("klique_reservation_runs_on_time", policy)] == 3
    assert metrics[("klique_reservation_start_seconds", (*policy, ("quantile", "0.95")))] == 380
    assert metrics[("klique_reservation_misses", (("cause", "reclaim_held"), *policy))] == 1
    assert metrics[("klique_reservation_misses", (("cause", "start"), *policy))] == 1
