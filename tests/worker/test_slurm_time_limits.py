"""Rule 1 (time limits) in Slurm mode against the real one-node cluster of deploy/slurm-dev: a
limited task's job is submitted with ``--time`` (Slurm keeps it in whole minutes), Slurm ends it
TIMEOUT at its limit and the task ends timed out, with ``KLIQUE_TIME_LIMIT_S`` and
``KLIQUE_ARRAY_INDEX`` in the job's environment."""

import subprocess

import pytest

from apps.tasks.models import Task, TaskArray
from tests.worker.conftest import run_until

pytestmark = [pytest.mark.django_db, pytest.mark.slurm]


def state(pk: int) -> str:
    return Task.objects.get(pk=pk).state


def slurm_job(pk: int) -> str:
    return Task.objects.get(pk=pk).events.get(kind="started").detail["slurm_job"]


def test_time_limit_slurm_ends_the_job_timeout_at_its_limit_and_the_task_times_out(
    make_daemon, pool, place, tmp_path
):
    pool.kind = pool.Kind.HPC
    pool.save()
    daemon = make_daemon(gpus=4, hostname="login-limit", slurm={"pending_timeout_s": 300})
    (task,) = place(pool)
    array = TaskArray.objects.create(user=task.user, size=2)
    seen = tmp_path / "env"
    command = f'echo "$KLIQUE_TIME_LIMIT_S $KLIQUE_ARRAY_INDEX" > {seen}; sleep 600'
    Task.objects.filter(pk=task.pk).update(command=command, time_limit_s=30, array=array, array_index=1)
    run_until(daemon, lambda: state(task.pk) == Task.State.RUNNING, timeout=60)
    job = slurm_job(task.pk)
    limit = subprocess.run(["squeue", "-h", "-j", job, "-o", "%l"], capture_output=True, text=True).stdout
    assert limit.strip() == "1:00"  # 30 s, which Slurm rounds up to a whole minute
    # Slurm looks at time limits every 30 s: the job ends 60 to 90 s after its start.
    run_until(daemon, lambda: state(task.pk) == Task.State.TIMED_OUT, timeout=150)
    done = Task.objects.get(pk=task.pk)
    assert done.exit_code != 0 and seen.read_text().split() == ["30", "1"]
    ended = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"], capture_output=True, text=True
    )
    assert ended.stdout.split() == ["TIMEOUT"]
