"""Slurm mode against the real one-node cluster of deploy/slurm-dev (four GPUs through GRES):
work submitted through the control plane runs as a batch job with ``--gres=gpu:N``, is reported
running only while Slurm keeps it allocated, passes its exit code through, is cancelled on a stop
command, and goes back to Klique's queue when Slurm requeues it or leaves it pending too long
(counted and charged, as placed work, until then)."""

import subprocess
import time
from datetime import timedelta

import pytest

from apps.engine import services as engine
from apps.ledger.models import UsageInterval
from apps.policies.models import ResourcePolicy
from apps.tasks.models import Task
from tests.worker.conftest import run_until, submit

pytestmark = [pytest.mark.django_db, pytest.mark.slurm]


def task(pk) -> Task:
    return Task.objects.get(pk=pk)


def slurm_job(pk) -> str:
    return task(pk).events.filter(kind="started").latest("pk").detail["slurm_job"]


def squeue_state(job: str) -> str:
    return subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"], capture_output=True, text=True
    ).stdout


@pytest.fixture
def slurm_daemon(make_daemon, pool):
    pool.kind = pool.Kind.HPC
    pool.save()
    return make_daemon(gpus=4, hostname="login-1", slurm={"pending_timeout_s": 300})


def test_submitted_work_runs_as_a_slurm_job_with_its_gpus_and_exit_code(slurm_daemon, estate, tmp_path):
    resource, token = estate
    pk = submit(token, resource, f"echo $CUDA_VISIBLE_DEVICES $KLIQUE_TASK_ID > {tmp_path}/seen; exit 3")
    engine.run_pass()
    run_until(slurm_daemon, lambda: task(pk).state == Task.State.FAILED, timeout=60)
    done = task(pk)
    assert done.exit_code == 3
    kinds = list(done.events.order_by("pk").values_list("kind", flat=True))
    assert kinds == ["submitted", "placed", "claimed", "started", "failed"]
    started = done.events.get(kind="started").detail
    # A job that starts and ends between two polls is first seen FAILED: it ran all the same.
    assert started["slurm_state"] in {"RUNNING", "COMPLETING", "FAILED"} and started["slurm_job"].isdigit()
    gpu, task_id = (tmp_path / "seen").read_text().split()
    assert gpu in {"0", "1", "2", "3"} and task_id == str(pk)


def test_a_stop_command_cancels_the_job_and_requeues_the_task(slurm_daemon, estate, tmp_path):
    resource, token = estate
    marker = tmp_path / "term"
    pk = submit(
        token, resource, f"trap 'echo TERM > {marker}; exit 143' TERM; while true; do sleep 0.1; done"
    )
    engine.run_pass()
    run_until(slurm_daemon, lambda: task(pk).state == Task.State.RUNNING, timeout=60)
    from django.utils import timezone

    from apps.tasks import services as lifecycle

    lifecycle.request_stop_many([task(pk)], Task.StopReason.RECLAIM, timezone.now())
    job = slurm_job(pk)
    run_until(slurm_daemon, lambda: task(pk).state == Task.State.QUEUED, timeout=60)
    assert marker.read_text().strip() == "TERM"
    assert squeue_state(job).strip() in {"", "CANCELLED", "FAILED", "COMPLETED"}


def test_a_job_slurm_requeues_goes_back_to_klique_and_runs_again(slurm_daemon, estate):
    resource, token = estate
    pk = submit(token, resource, "sleep 30")
    engine.run_pass()
    run_until(slurm_daemon, lambda: task(pk).state == Task.State.RUNNING, timeout=60)
    job = slurm_job(pk)
    subprocess.run(["scontrol", "requeue", job], check=True)
    run_until(slurm_daemon, lambda: task(pk).state == Task.State.QUEUED, timeout=60)
    requeued = task(pk)
    assert requeued.last_preemption_reason == "released" and requeued.preemption_count == 1
    assert squeue_state(job).strip() in {"", "CANCELLED"}
    engine.run_pass()
    run_until(slurm_daemon, lambda: task(pk).state == Task.State.RUNNING, timeout=60)
    assert slurm_job(pk) != job
    slurm_daemon.shutdown()
    run_until(slurm_daemon, slurm_daemon.drained, timeout=60)


def test_a_job_pending_in_slurm_is_counted_and_charged_from_placement_until_released(
    make_daemon, pool, estate
):
    """While Slurm keeps the job waiting the task stays placed: it counts against its policy's
    limit and its interval is open from the placement (DESIGN section 4). After the pending
    timeout the job is cancelled, the task goes back to its queue and the interval ends."""
    daemon = make_daemon(
        gpus=4, hostname="login-2", slurm={"pending_timeout_s": 2, "extra_args": ("--begin=now+600",)}
    )
    resource, token = estate
    ResourcePolicy.objects.filter(pk=resource.policy_id).update(limit=1)
    first = submit(token, resource, "true")
    second = submit(token, resource, "true")
    engine.run_pass()
    run_until(daemon, lambda: daemon.runner.jobs, timeout=60)
    pending = task(first)
    assert pending.state == Task.State.PLACED and pending.worker is not None and pending.started_at is None
    assert squeue_state(daemon.runner.jobs[first].job_id).strip() == "PENDING"
    engine.run_pass()
    assert task(second).state == Task.State.QUEUED, "the pending job counts against the limit of 1"
    interval = UsageInterval.objects.get(task_id=first)
    assert interval.start == pending.placed_at and interval.end is None
    run_until(daemon, lambda: task(first).state == Task.State.QUEUED, timeout=60)
    released = task(first)
    assert released.last_preemption_reason == "released" and released.started_at is None
    assert daemon.runner.jobs == {}
    interval.refresh_from_db()
    requeued_at = released.events.get(kind="requeued").at
    assert interval.end - interval.start >= timedelta(seconds=2) and interval.end <= requeued_at


def test_a_multi_node_task_asks_slurm_for_its_nodes_and_fails_with_slurms_reason_when_it_never_fits(
    tmp_path,
):
    """The dev cluster has one node: Slurm takes a job of --nodes=2 and leaves it pending with
    reason PartitionConfig or PartitionNodeLimit, which no wait cures, so the runner cancels it and
    reports it failed with that reason (a ``start_failed``), instead of handing it back to be
    placed here again."""
    from klique.worker.slurm import SlurmRunner

    runner = SlurmRunner(tmp_path / "state", tmp_path / "ck", tag="multi-node-test")
    runner.start({"id": 990001, "command": "true", "gpus": "1", "nodes": 2, "spec": {}}, [])
    job = runner.jobs[990001].job_id
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    assert "NumNodes=2" in shown
    changes = []
    deadline = time.monotonic() + 30
    while not changes and time.monotonic() < deadline:
        changes = runner.poll()
        time.sleep(0.2)
    (change,) = changes
    assert change.kind == "failed" and "pends with reason Partition" in change.detail["error"]
    assert squeue_state(job).strip() in {"", "CANCELLED"}


def test_the_daemon_reports_the_gpus_slurm_has_in_its_partition(slurm_daemon):
    """sinfo's GRES of the dev cluster's one node (gpu:4): the daemon serves no more than that."""
    assert slurm_daemon.runner.observed_gpus() == 4
    assert slurm_daemon.observed == 4 and slurm_daemon.heartbeat_body()["gpus"] == "4"
