"""The daemon with the real control plane: it claims placed work, runs it as subprocesses on the
GPUs the claim gave it, stops it on command (SIGTERM, grace, SIGKILL), reports every exit, and
keeps its work through an outage of the control plane."""

from collections import deque
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from apps.ledger.models import UsageInterval
from apps.pools.models import Worker
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from apps.workers import services as protocol
from klique.worker.gpus import Nvml
from tests.pools.conftest import sweep_steadily
from tests.worker.conftest import run_until
from tests.worker.fakes import fake_pynvml

pytestmark = pytest.mark.django_db


def placeable(task) -> Task:
    return Task.objects.select_related("compute_resource__policy", "compute_resource__profile").get(
        pk=task.pk
    )


def state(task) -> str:
    task.refresh_from_db()
    return task.state


def test_placed_work_runs_as_subprocesses_on_their_own_gpus_and_completes(make_daemon, pool, place, tmp_path):
    daemon = make_daemon(gpus=2)
    out = tmp_path / "out"
    out.mkdir()
    tasks = place(pool, 2)
    for task in tasks:
        Task.objects.filter(pk=task.pk).update(
            command=f'echo "$CUDA_VISIBLE_DEVICES $KLIQUE_TASK_ID $KLIQUE_CHECKPOINT_DIR" > {out}/{task.pk}'
        )
    run_until(daemon, lambda: all(state(t) == Task.State.SUCCEEDED for t in tasks))
    seen = [(out / str(t.pk)).read_text().split() for t in tasks]
    assert sorted(s[0] for s in seen) == ["GPU-0", "GPU-1"]
    assert [s[1] for s in seen] == [str(t.pk) for t in tasks]
    assert all(s[2].endswith(f"checkpoints/{t.pk}") for s, t in zip(seen, tasks, strict=True))
    for task in tasks:
        kinds = list(task.events.order_by("pk").values_list("kind", flat=True))
        assert kinds == ["submitted", "placed", "claimed", "started", "succeeded"]
        assert task.events.get(kind="claimed").detail["worker"] == "node-1"
        assert UsageInterval.objects.get(task=task).end == task.ended_at


def test_a_failing_command_reports_its_exit_code_and_log_tail(make_daemon, pool, place):
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="echo something broke >&2; exit 7")
    run_until(daemon, lambda: state(task) == Task.State.FAILED)
    assert task.exit_code == 7 and "something broke" in task.log.tail


def test_the_enrolment_token_is_not_handed_to_task_code(make_daemon, pool, place, tmp_path, monkeypatch):
    monkeypatch.setenv("KLIQUE_ENROLMENT_TOKEN", "kqe_secret")
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command=f"env > {tmp_path}/env")
    run_until(daemon, lambda: state(task) == Task.State.SUCCEEDED)
    assert "kqe_secret" not in (tmp_path / "env").read_text()


def test_a_preempted_task_gets_sigterm_and_is_requeued_in_its_old_place(make_daemon, pool, place, tmp_path):
    daemon = make_daemon()
    (task,) = place(pool)
    marker = tmp_path / "term"
    command = f"trap 'echo TERM > {marker}; exit 143' TERM; while true; do sleep 0.05; done"
    Task.objects.filter(pk=task.pk).update(command=command)
    run_until(daemon, lambda: state(task) == Task.State.RUNNING)
    lifecycle.request_stop_many([Task.objects.get(pk=task.pk)], Task.StopReason.RECLAIM, timezone.now())
    run_until(daemon, lambda: state(task) == Task.State.QUEUED)
    assert marker.read_text().strip() == "TERM"
    assert task.preemption_count == 1 and task.last_preemption_reason == "reclaim"
    assert UsageInterval.objects.get(task=task).end is not None
    assert daemon.held == {} and daemon.free == [1000, 1000]


def test_work_that_ignores_sigterm_is_killed_when_the_grace_is_over(make_daemon, pool, place):
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="trap '' TERM; while true; do sleep 0.05; done")
    run_until(daemon, lambda: state(task) == Task.State.RUNNING)
    asked = timezone.now()
    lifecycle.cancel(task, at=asked)
    run_until(daemon, lambda: state(task) == Task.State.CANCELED)
    assert task.ended_at - asked >= timedelta(seconds=1)


def test_the_daemon_keeps_its_work_through_an_outage_and_reports_when_back(make_daemon, pool, place, network):
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="sleep 0.5")
    run_until(daemon, lambda: state(task) == Task.State.RUNNING)
    network.down = True
    run_until(daemon, lambda: daemon.reports and daemon.failures >= 2)
    assert state(task) == Task.State.RUNNING and daemon.held[task.pk].ended
    back = timezone.now()
    network.down = False
    run_until(daemon, lambda: state(task) == Task.State.SUCCEEDED)
    assert daemon.failures == 0 and daemon.held == {}
    assert task.ended_at < back, "charged until the work really ended, not until the report came"


def test_the_daemon_backs_off_while_the_control_plane_is_down(make_daemon, network):
    daemon = make_daemon()
    network.down = True
    before = network.requests
    run_until(daemon, lambda: daemon.failures >= 3, timeout=20)
    assert network.requests - before == daemon.failures
    assert daemon.retry_at > 0


def test_a_canceled_task_the_worker_no_longer_holds_is_killed_as_an_orphan(make_daemon, pool, place):
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="sleep 30")
    run_until(daemon, lambda: state(task) == Task.State.RUNNING)
    lifecycle.requeue_lost(
        [Task.objects.get(pk=task.pk)], "worker_lost", timezone.now(), ended_at=timezone.now()
    )
    run_until(daemon, lambda: not daemon.held and not daemon.orphans)
    assert daemon.runner.processes == {} and state(task) == Task.State.QUEUED
    assert daemon.free == [1000, 1000] and daemon.reports == deque()


def test_a_retired_worker_enrols_again_and_drops_its_old_work(make_daemon, pool, place):
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="sleep 30")
    run_until(daemon, lambda: state(task) == Task.State.RUNNING)
    old = Worker.objects.get(hostname="node-1", state=Worker.State.ACTIVE)
    protocol.retire(old, timezone.now())
    run_until(daemon, lambda: Worker.objects.filter(hostname="node-1", state="active").exists())
    assert state(task) == Task.State.QUEUED
    run_until(daemon, lambda: not daemon.runner.processes)
    lifecycle.place_many([(placeable(task), pool)], timezone.now())
    run_until(daemon, lambda: state(task) == Task.State.RUNNING)
    assert task.worker.state == Worker.State.ACTIVE and task.worker != old


def test_a_daemon_told_to_shut_down_stops_its_work_which_is_requeued(make_daemon, pool, place):
    daemon = make_daemon()
    tasks = place(pool, 2)
    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(command="sleep 30")
    run_until(daemon, lambda: all(state(t) == Task.State.RUNNING for t in tasks))
    daemon.shutdown()
    run_until(daemon, daemon.drained)
    assert [state(t) for t in tasks] == [Task.State.QUEUED, Task.State.QUEUED]


def test_fractions_share_a_gpu(make_daemon, pool, place, tmp_path):
    daemon = make_daemon(gpus=1)
    tasks = place(pool, 2, gpus="0.5")
    for task in tasks:
        Task.objects.filter(pk=task.pk).update(
            command=f"echo $CUDA_VISIBLE_DEVICES > {tmp_path}/{task.pk}; sleep 0.3"
        )
    run_until(daemon, lambda: all(state(t) == Task.State.RUNNING for t in tasks))
    assert daemon.free == [0]
    run_until(daemon, lambda: all(state(t) == Task.State.SUCCEEDED for t in tasks))
    assert {(tmp_path / str(t.pk)).read_text().strip() for t in tasks} == {"GPU-0"}


def test_the_heartbeat_carries_gpu_stats_when_nvml_is_there(make_daemon):
    daemon = make_daemon(gpus=2)
    worker = Worker.objects.get(hostname="node-1", state=Worker.State.ACTIVE)
    daemon.tick()
    worker.refresh_from_db()
    assert worker.gpu_stats == [] and worker.last_heartbeat is not None
    daemon.nvml = Nvml(fake_pynvml(2))
    daemon.next_heartbeat = 0
    daemon.tick()
    worker.refresh_from_db()
    assert worker.gpu_stats == [
        {
            "index": i,
            "utilization_pct": 40 + i,
            "memory_used_mb": 1024,
            "memory_total_mb": 81920,
            "temperature_c": 60,
        }
        for i in range(2)
    ]


def test_a_daemon_whose_claim_is_refused_as_lost_heartbeats_at_once_then_claims(
    make_daemon, pool, place, caplog
):
    daemon = make_daemon()
    worker = Worker.objects.get(hostname="node-1", state=Worker.State.ACTIVE)
    daemon.tick()  # the first heartbeat
    Worker.objects.filter(pk=worker.pk).update(state=Worker.State.LOST)  # as a sweep would after a gap
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="sleep 0.2")
    daemon.next_heartbeat, daemon.next_claim = daemon.clock() + 3600, 0
    daemon.tick()
    assert "claim refused" in caplog.text and "409" in caplog.text
    assert daemon.next_heartbeat == 0 and daemon.failures == 0
    run_until(daemon, lambda: state(task) == Task.State.SUCCEEDED)
    worker.refresh_from_db()
    assert worker.state == Worker.State.ACTIVE and task.worker == worker


def test_a_task_handed_back_to_its_lost_worker_runs_again_only_after_the_old_run_ended(
    make_daemon, pool, place, network, tmp_path
):
    """The daemon was cut off long enough to be marked lost; its task went back to the queue and
    was placed on the same pool again. Back online, it is told the old run is an orphan and, in
    the same tick, claims the task afresh: the new run starts only once the old one has ended (one
    run at a time in the task's checkpoint directory), the old run's exit is not reported on the
    new claim, and the old run's GPU comes back."""
    daemon = make_daemon(gpus=2)
    (task,) = place(pool)
    runs, marker = tmp_path / "runs", tmp_path / "marker"
    command = (
        f"if [ -f {marker} ]; then echo second >> {runs}; exit 0; fi; touch {marker}; "
        f"trap 'sleep 0.3; echo first-ended >> {runs}; exit 143' TERM; while true; do sleep 0.05; done"
    )
    Task.objects.filter(pk=task.pk).update(command=command)
    run_until(daemon, lambda: state(task) == Task.State.RUNNING)
    network.down = True
    run_until(daemon, lambda: daemon.failures >= 1)
    Worker.objects.filter(pk=task.worker_id).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    sweep_steadily(timezone.now() - timedelta(minutes=1), timezone.now())
    assert state(task) == Task.State.QUEUED and task.last_preemption_reason == "worker_lost"
    lifecycle.place_many([(placeable(task), pool)], timezone.now())
    daemon.retry_at = daemon.next_heartbeat = daemon.next_claim = 0
    network.down = False
    daemon.tick()
    assert task.pk in daemon.orphans and daemon.held[task.pk].waiting, "claimed again at once"
    task.refresh_from_db()
    assert task.state == Task.State.PLACED and task.worker.state == Worker.State.ACTIVE
    assert daemon.free == [0, 0], "the old run's GPU and the new claim's"
    run_until(daemon, lambda: state(task) == Task.State.SUCCEEDED)
    assert runs.read_text().split() == ["first-ended", "second"]
    assert task.preemption_count == 1 and task.exit_code == 0
    kinds = list(task.events.order_by("pk").values_list("kind", flat=True))
    assert kinds == [
        "submitted", "placed", "claimed", "started", "preempted", "requeued",
        "placed", "claimed", "started", "succeeded",
    ]  # fmt: skip
    run_until(daemon, lambda: not daemon.held and not daemon.orphans)
    assert daemon.free == [1000, 1000] and daemon.runner.processes == {}


def test_output_with_a_nul_byte_ends_the_task_once_charged_once_with_its_log_kept(make_daemon, pool, place):
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command='printf "a\\000b\\n"')
    run_until(daemon, lambda: state(task) == Task.State.SUCCEEDED and not daemon.reports)
    assert task.events.filter(kind="claimed").count() == 1
    assert UsageInterval.objects.filter(task=task).count() == 1
    assert task.log.tail == "a\ufffdb\n"


def test_a_report_the_server_refuses_is_sent_again_reduced_and_the_work_is_not_run_again(
    make_daemon, pool, place, network
):
    refused = []
    handle = network.handle_request

    def refuse_log_tails(request):
        if request.url.path.endswith("/sync"):  # an older server: no sync, separate reports
            return httpx.Response(404, json={"detail": "Not found."})
        if request.url.path.endswith("/exited") and b"log_tail" in request.content:
            refused.append(request.url.path)
            return httpx.Response(400, json={"log_tail": ["Refused, as an older server did."]})
        return handle(request)

    network.handle_request = refuse_log_tails
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="echo done")
    run_until(daemon, lambda: state(task) == Task.State.SUCCEEDED and not daemon.reports)
    assert refused == [f"/api/v1/workers/tasks/{task.pk}/exited"]
    assert task.exit_code == 0 and task.events.filter(kind="claimed").count() == 1
    assert UsageInterval.objects.get(task=task).end == task.ended_at
    assert daemon.held == {}


def test_a_command_above_the_argument_limit_ends_failed_with_the_reason_after_the_start_attempts(
    make_daemon, pool, place, settings
):
    """A row written before commands were bounded: the OS refuses to run it (E2BIG). The engine's
    part (placing the requeued task again) is played here by the test."""
    daemon = make_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(command="true " + "x" * 1_000_000)

    def ended() -> bool:
        current = placeable(task)
        if current.state == Task.State.QUEUED:
            lifecycle.place_many([(current, pool)], timezone.now())
        return current.state == Task.State.FAILED and not daemon.reports

    run_until(daemon, ended)
    task.refresh_from_db()
    attempts = settings.WORKER_START_ATTEMPTS
    assert attempts == 3
    assert task.events.filter(kind="claimed").count() == attempts
    assert task.events.filter(kind="start_failed").count() == attempts
    assert "Argument list too long" in task.failure and task.exit_code is None
    assert task.events.get(kind="failed").reason == "start_failed"
    assert UsageInterval.objects.filter(task=task, end__isnull=True).count() == 0
    assert daemon.held == {} and daemon.free == [1000, 1000]
