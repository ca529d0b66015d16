"""The idle limits: each fires at exactly its time and not before, from the samples the daemons
send; a null measurement never counts as idle, nor longer than the session has run; the owner is
warned first, once per idle stretch, and never of a later stop with the stop itself; the stop is
audited with the limit, and a stopped (or preempted) session ends instead of being requeued."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.models import Notification
from apps.sessions import services
from apps.sessions.models import ProfileIdleLimits, ResourceIdleLimits, Session
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from tests.sessions.conftest import sample

pytestmark = pytest.mark.django_db
TICK = timedelta(microseconds=1)


@pytest.fixture(autouse=True)
def warning(settings):
    settings.SESSION_IDLE_WARNING_S = 30


BASE = timezone.now().replace(microsecond=0) - timedelta(hours=1)
STARTED = BASE - timedelta(minutes=10)


@pytest.fixture
def fresh(estate, jupyter, running):
    """A session that started just now."""
    task = services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter)
    return running(task)


@pytest.fixture
def session(fresh):
    """A session that has run since STARTED, so the samples of these tests (from BASE) fall
    within its run: a sample is never taken as earlier than the session's start."""
    Task.objects.filter(pk=fresh.pk).update(started_at=STARTED)
    fresh.refresh_from_db()
    return fresh


@pytest.fixture
def limits(estate):
    """limits(**fields) -> the idle limits of the profile of vision/a100."""

    def make(**fields):
        return ProfileIdleLimits.objects.create(profile=estate.vision_a100.profile, **fields)

    return make


def send(worker, task, at, **values):
    answer = worker.heartbeat([task.pk], {str(task.pk): sample(at, **values)})
    assert answer.status_code == 200, answer.data


def state(task) -> str:
    task.refresh_from_db()
    return task.state


@pytest.mark.parametrize(
    ("limit", "field", "idle", "busy"),
    [
        ("cpu", "cpu_idle_s", {"cpu_percent": 1.0}, {"cpu_percent": 50.0}),
        ("gpu", "gpu_idle_s", {"gpu_util": 0.0}, {"gpu_util": 90.0}),
        ("network", "net_idle_s", {"connections": 0, "net_bytes": 100}, {"connections": 2, "net_bytes": 100}),
    ],
)
def test_each_measured_limit_fires_at_exactly_its_time_and_not_before(
    session, worker, limits, limit, field, idle, busy
):
    limits(**{field: 600})
    send(worker, session, BASE, **busy)
    send(worker, session, BASE + timedelta(seconds=60), **idle)
    send(worker, session, BASE + timedelta(seconds=120), **idle)
    since = BASE + timedelta(seconds=60)
    assert services.check_idle(since + timedelta(seconds=600) - TICK)["stopped"] == 0
    assert state(session) == Task.State.RUNNING
    assert services.check_idle(since + timedelta(seconds=600))["stopped"] == 1
    assert state(session) == Task.State.STOPPING and session.stop_reason == "idle"
    event = session.events.get(kind=TaskEvent.Kind.STOP_REQUESTED)
    assert event.reason == "idle" and event.detail["limit"] == limit and event.detail["limit_s"] == 600
    assert Session.objects.get(pk=session.pk).stopped_by == limit


def test_a_busy_sample_restarts_the_idle_clock(session, worker, limits):
    limits(cpu_idle_s=600)
    send(worker, session, BASE, cpu_percent=1.0)
    send(worker, session, BASE + timedelta(seconds=300), cpu_percent=80.0)
    send(worker, session, BASE + timedelta(seconds=400), cpu_percent=1.0)
    assert services.check_idle(BASE + timedelta(seconds=900))["stopped"] == 0
    assert services.check_idle(BASE + timedelta(seconds=1000))["stopped"] == 1


def test_network_traffic_without_connections_is_not_idle(session, worker, limits):
    limits(net_idle_s=60)
    send(worker, session, BASE, connections=0, net_bytes=100)
    send(worker, session, BASE + timedelta(seconds=30), connections=0, net_bytes=500)
    assert Session.objects.get(pk=session.pk).net_idle_since is None
    send(worker, session, BASE + timedelta(seconds=40), connections=0, net_bytes=500)
    assert services.check_idle(BASE + timedelta(seconds=99))["stopped"] == 0
    assert services.check_idle(BASE + timedelta(seconds=100))["stopped"] == 1


def test_null_measurements_never_count_as_idle(session, worker, limits):
    limits(cpu_idle_s=1, gpu_idle_s=1, net_idle_s=1, jupyter_idle_s=1)
    for seconds in (0, 60, 120):
        send(worker, session, BASE + timedelta(seconds=seconds))  # every value null: no GPU, no psutil
    stored = Session.objects.get(pk=session.pk)
    assert (stored.cpu_idle_since, stored.gpu_idle_since, stored.net_idle_since) == (None, None, None)
    assert services.check_idle(BASE + timedelta(days=20)) == {"warned": 0, "stopped": 0}
    assert state(session) == Task.State.RUNNING and not Notification.objects.exists()


def test_jupyters_own_last_activity_fires_its_limit(session, worker, limits):
    limits(jupyter_idle_s=900)
    last = BASE - timedelta(seconds=100)
    send(worker, session, BASE, last_activity=last, cpu_percent=50.0)
    assert services.check_idle(last + timedelta(seconds=900) - TICK)["stopped"] == 0
    assert services.check_idle(last + timedelta(seconds=900))["stopped"] == 1
    assert session.events.get(kind=TaskEvent.Kind.STOP_REQUESTED).detail["limit"] == "jupyter"


def test_max_lifetime_counts_from_the_start(session, limits):
    limits(max_lifetime_s=3600)
    started = session.started_at
    assert services.check_idle(started + timedelta(seconds=3600) - TICK)["stopped"] == 0
    assert services.check_idle(started + timedelta(seconds=3600))["stopped"] == 1
    assert session.events.get(kind=TaskEvent.Kind.STOP_REQUESTED).detail["limit"] == "lifetime"


def test_the_compute_resource_overrides_the_profile_limit_by_limit(estate, session, worker, limits):
    limits(cpu_idle_s=600, max_lifetime_s=7200)
    ResourceIdleLimits.objects.create(compute_resource=estate.vision_a100, cpu_idle_s=60, cpu_below_pct=20)
    send(worker, session, BASE, cpu_percent=15.0)  # idle only under the resource's 20 %
    assert services.check_idle(BASE + timedelta(seconds=59))["stopped"] == 0
    assert services.check_idle(BASE + timedelta(seconds=60))["stopped"] == 1


def test_the_owner_is_warned_first_and_once_per_limit(estate, session, worker, limits):
    limits(cpu_idle_s=600)
    send(worker, session, BASE, cpu_percent=0.5)
    assert services.check_idle(BASE + timedelta(seconds=569))["warned"] == 0
    assert services.check_idle(BASE + timedelta(seconds=570))["warned"] == 1
    assert services.check_idle(BASE + timedelta(seconds=580))["warned"] == 0
    warnings = Notification.objects.filter(user=estate.member, kind=Notification.Kind.SESSION_IDLE)
    assert warnings.count() == 1 and "unless it is used" in warnings.get().message
    assert state(session) == Task.State.RUNNING
    services.check_idle(BASE + timedelta(seconds=600))
    notes = list(warnings.order_by("created_at", "pk").values_list("message", flat=True))
    assert len(notes) == 2 and "unless it is used" in notes[0] and "was stopped by its idle limit" in notes[1]


def test_an_idle_stop_ends_the_session_when_its_worker_reports_it_stopped(session, worker, limits):
    limits(max_lifetime_s=60)
    services.check_idle(session.started_at + timedelta(seconds=60))
    answer = worker.heartbeat([session.pk])
    assert answer.data["commands"] == [
        {
            "stop": session.pk,
            "reason": "canceled",
            "why": "idle",
            "grace_s": answer.data["commands"][0]["grace_s"],
        }
    ]
    assert worker.stopped(session.pk).status_code == 200
    session.refresh_from_db()
    assert (session.state, session.stop_reason, session.preemption_count) == ("canceled", "idle", 0)
    ended = session.events.get(kind=TaskEvent.Kind.ENDED)
    assert ended.reason == "idle"
    assert not session.events.filter(kind=TaskEvent.Kind.REQUEUED).exists()
    assert session.intervals.get().end == session.ended_at


def test_a_preempted_session_ends_with_the_reason_and_is_not_requeued(session, worker):
    lifecycle.request_stop_many([session], Task.StopReason.RECLAIM, timezone.now())
    assert worker.stopped(session.pk).status_code == 200
    session.refresh_from_db()
    assert (session.state, session.stop_reason) == ("canceled", "reclaim")
    assert session.events.filter(kind=TaskEvent.Kind.ENDED, reason="reclaim").exists()


def test_a_batch_task_is_still_requeued_after_a_preemption(estate, worker, running):
    task = running(lifecycle.submit(user=estate.member, compute_resource=estate.vision_a100, command="x"))
    lifecycle.request_stop_many([task], Task.StopReason.RECLAIM, timezone.now())
    worker.stopped(task.pk)
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED


def test_limit_bounds_are_checked_naming_the_field(estate):
    from django.core.exceptions import ValidationError

    row = ProfileIdleLimits(profile=estate.vision_a100.profile, cpu_idle_s=0, gpu_below_pct=150)
    with pytest.raises(ValidationError) as refused:
        row.full_clean()
    assert set(refused.value.message_dict) == {"cpu_idle_s", "gpu_below_pct"}


def test_a_server_exiting_0_on_its_stop_ends_the_session_with_the_stop_reason(session, worker, limits):
    limits(max_lifetime_s=60)
    services.check_idle(session.started_at + timedelta(seconds=60))
    answer = worker.http.post(f"/api/v1/workers/tasks/{session.pk}/exited", {"exit_code": 0}, format="json")
    assert answer.status_code == 200
    session.refresh_from_db()
    assert (session.state, session.stop_reason, session.exit_code) == ("canceled", "idle", None)


def test_a_session_that_exits_on_its_own_succeeds_or_fails_like_a_task(session, worker):
    answer = worker.http.post(f"/api/v1/workers/tasks/{session.pk}/exited", {"exit_code": 1}, format="json")
    assert answer.status_code == 200
    session.refresh_from_db()
    assert (session.state, session.exit_code) == ("failed", 1)


def test_a_check_running_twice_warns_once(estate, session, worker, limits):
    limits(cpu_idle_s=600)
    send(worker, session, BASE, cpu_percent=0.5)
    at = BASE + timedelta(seconds=575)
    assert [services.check_idle(at)["warned"], services.check_idle(at)["warned"]] == [1, 0]


def test_the_beat_runs_the_idle_check_on_the_sweep_queue(settings, session, limits):
    from apps.sessions.tasks import check_idle

    entry = settings.CELERY_BEAT_SCHEDULE["session-idle"]
    assert entry["task"] == check_idle.name == "klique.sessions.check_idle"
    assert entry["options"]["queue"] == "sweep"
    limits(max_lifetime_s=5)
    Task.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(seconds=10))
    assert check_idle() == {"warned": 0, "stopped": 1}
    assert state(session) == Task.State.STOPPING


@pytest.mark.django_db(transaction=True)
def test_run_engine_stops_a_session_past_its_limit(session, limits):
    import io
    import signal

    from django.core.management import call_command

    limits(max_lifetime_s=5)
    Task.objects.filter(pk=session.pk).update(started_at=timezone.now() - timedelta(seconds=10))
    handler = signal.getsignal(signal.SIGTERM)
    try:
        call_command("run_engine", passes=1, interval=0, stdout=io.StringIO())
    finally:
        signal.signal(signal.SIGTERM, handler)
    session.refresh_from_db()
    assert (session.state, session.stop_reason) == ("stopping", "idle")


def test_it_admins_set_session_kinds_and_idle_limits_in_the_admin(client, estate):
    from apps.accounts.models import Membership
    from apps.accounts.services import staff_auth_group

    estate.it.is_staff = True
    estate.it.save()
    estate.it.groups.add(staff_auth_group(Membership.Role.IT_ADMIN))
    client.force_login(estate.it)
    added = client.post(
        "/admin/klique_sessions/sessionkind/add/",
        {"name": "Jupyter", "type": "jupyter", "command": "[]", "ready_path": "", "enabled": "on"},
    )
    assert added.status_code == 302
    profile = estate.vision_a100.profile.pk
    refused = client.post(
        "/admin/klique_sessions/profileidlelimits/add/",
        {"profile": profile, "cpu_idle_s": "1_0", "gpu_below_pct": "150"},
    )
    page = refused.content.decode()
    assert refused.status_code == 200 and "Plain" in page and "less than or equal to 100" in page
    saved = client.post(
        "/admin/klique_sessions/profileidlelimits/add/",
        {"profile": profile, "cpu_idle_s": "600", "cpu_below_pct": "10", "max_lifetime_s": "28800"},
    )
    assert saved.status_code == 302
    assert ProfileIdleLimits.objects.get(profile_id=profile).cpu_idle_s == 600


def test_a_session_its_worker_cannot_start_fails_at_once_with_the_reason(estate, jupyter, worker):
    from tests.sessions.conftest import place

    task = services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter)
    place(task, estate.pool)
    worker.claim()
    error = {"error": "jupyter-server is not installed"}
    answer = worker.http.post(f"/api/v1/workers/tasks/{task.pk}/start_failed", error, format="json")
    assert answer.status_code == 200
    task.refresh_from_db()
    assert task.state == Task.State.FAILED and "jupyter-server is not installed" in task.failure
    assert not task.events.filter(kind=TaskEvent.Kind.REQUEUED).exists()


def test_the_preemption_notice_of_a_session_says_it_will_end_and_of_a_batch_task_that_it_was_requeued(
    estate, session, running
):
    from apps.engine.apply import _preempted_message

    task = running(lifecycle.submit(user=estate.member, compute_resource=estate.vision_a100, command="x"))
    assert _preempted_message(session, "reclaim") == (
        f"Session {session} is being stopped and will end: "
        "its GPUs were reclaimed for another group's reservation."
    )
    assert "requeued at the front of its queue" in _preempted_message(task, "budget")


def warnings_of(user) -> list[str]:
    notes = Notification.objects.filter(user=user, kind=Notification.Kind.SESSION_IDLE).order_by("pk")
    return [m for m in notes.values_list("message", flat=True) if "was stopped" not in m]


def test_a_session_is_never_idle_for_longer_than_it_has_run(fresh, worker, limits):
    """A worker whose clock lags an hour: its samples (and Jupyter's last activity) count from
    the session's start, so a 10-minute limit does not stop a session started seconds ago."""
    limits(cpu_idle_s=600, jupyter_idle_s=600)
    lagging = timezone.now() - timedelta(hours=1)
    send(worker, fresh, lagging, cpu_percent=0.0, last_activity=lagging - timedelta(minutes=5))
    stored = Session.objects.get(pk=fresh.pk)
    assert stored.cpu_idle_since == stored.last_activity == fresh.started_at
    assert services.check_idle(timezone.now())["stopped"] == 0
    assert state(fresh) == Task.State.RUNNING
    assert services.check_idle(fresh.started_at + timedelta(seconds=600))["stopped"] == 1


def test_a_sample_older_than_the_previous_one_does_not_move_idle_back(session, worker, limits):
    limits(cpu_idle_s=600)
    send(worker, session, BASE + timedelta(seconds=300), cpu_percent=50.0)
    send(worker, session, BASE, cpu_percent=1.0)  # out of order: taken as of the previous sample
    assert Session.objects.get(pk=session.pk).cpu_idle_since == BASE + timedelta(seconds=300)


@pytest.mark.parametrize(
    ("idle", "busy"),
    [
        ({"cpu_percent": 0.5}, {"cpu_percent": 90.0}),
        ({"connections": 0, "net_bytes": 100}, {"connections": 1, "net_bytes": 100}),
    ],
)
def test_the_owner_is_warned_again_before_a_second_idle_stretch_stops_the_session(
    estate, session, worker, limits, idle, busy
):
    """Warned once, the owner comes back (a busy sample ends the idle stretch); when the session
    goes idle again it is warned again before it is stopped."""
    limits(cpu_idle_s=600, net_idle_s=600)
    send(worker, session, BASE, **idle)
    assert services.check_idle(BASE + timedelta(seconds=575))["warned"] == 1
    send(worker, session, BASE + timedelta(seconds=580), **busy)
    send(worker, session, BASE + timedelta(seconds=700), **idle)
    second_deadline = BASE + timedelta(seconds=1300)
    assert services.check_idle(second_deadline - timedelta(seconds=20)) == {"warned": 1, "stopped": 0}
    assert len(warnings_of(estate.member)) == 2, warnings_of(estate.member)
    assert services.check_idle(second_deadline)["stopped"] == 1


def test_jupyter_activity_ends_its_idle_stretch_and_the_next_one_is_warned_again(
    estate, session, worker, limits
):
    limits(jupyter_idle_s=600)
    send(worker, session, BASE, last_activity=BASE)
    assert services.check_idle(BASE + timedelta(seconds=575))["warned"] == 1
    back = BASE + timedelta(seconds=580)
    send(worker, session, back, last_activity=back)
    assert services.check_idle(back + timedelta(seconds=575))["warned"] == 1
    assert len(warnings_of(estate.member)) == 2


def test_no_warning_of_a_later_stop_is_sent_with_the_stop(estate, session, worker, limits):
    """The CPU limit fires while the lifetime limit is 20 s away (inside the 30 s warning): the
    owner gets the stop's notice only, not also a warning of a stop still to come."""
    limits(cpu_idle_s=600, max_lifetime_s=3620)
    send(worker, session, STARTED + timedelta(seconds=3000), cpu_percent=0.5)
    assert services.check_idle(STARTED + timedelta(seconds=3600)) == {"warned": 0, "stopped": 1}
    notes = Notification.objects.filter(user=estate.member, kind=Notification.Kind.SESSION_IDLE)
    assert [n.message.split(":")[0] for n in notes] == [f"Session {session} was stopped by its idle limit"]


def test_a_lifetime_warning_says_when_the_lifetime_ends_not_unless_it_is_used(estate, session, limits):
    limits(max_lifetime_s=3600)
    deadline = session.started_at + timedelta(seconds=3600)
    assert services.check_idle(deadline - timedelta(seconds=10))["warned"] == 1
    [message] = warnings_of(estate.member)
    assert f"reaches its maximum lifetime at {deadline:%Y-%m-%d %H:%M:%S} UTC" in message
    assert "unless" not in message


def test_a_heartbeat_reads_the_idle_limits_once_for_all_its_sessions(
    estate, jupyter, worker, running, limits
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    limits(cpu_idle_s=600)
    tasks = [
        running(services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter))
        for _ in range(3)
    ]
    samples = {str(t.pk): sample(timezone.now(), cpu_percent=1.0) for t in tasks}
    with CaptureQueriesContext(connection) as queries:
        assert worker.heartbeat([t.pk for t in tasks], samples).status_code == 200
    reads = [q["sql"] for q in queries if "idlelimits" in q["sql"].lower()]
    assert len(reads) == 2, reads  # one of profile limits, one of compute resource limits
    assert Session.objects.filter(cpu_idle_since__isnull=False).count() == 3
