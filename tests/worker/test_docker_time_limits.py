"""Rule 1 (time limits) and rule 5 (arrays) in Docker mode, against a real Docker API (Podman's
service, tests/worker/docker_dev.py; skipped without Podman, failed in CI): the container gets
``KLIQUE_TIME_LIMIT_S`` and ``KLIQUE_ARRAY_INDEX``, and the daemon's own timer stops it at its
limit (SIGTERM through the container's init, SIGKILL after the grace), so the task ends timed out."""

import pytest

from apps.tasks.models import Task, TaskArray
from tests.worker import docker_dev, test_docker_runner
from tests.worker.conftest import run_until
from tests.worker.docker_dev import IMAGE

docker_host, docker_client = docker_dev.docker_host, docker_dev.docker_client
docker_daemon = test_docker_runner.docker_daemon

pytestmark = pytest.mark.django_db


def timed_out(pk: int) -> bool:
    return Task.objects.get(pk=pk).state == Task.State.TIMED_OUT


def test_time_limit_docker_mode_the_daemon_stops_the_container_at_its_limit(docker_daemon, pool, place):
    daemon = docker_daemon()
    (task,) = place(pool)
    array = TaskArray.objects.create(user=task.user, size=2)
    command = 'echo "limit=$KLIQUE_TIME_LIMIT_S index=$KLIQUE_ARRAY_INDEX"; sleep 60'
    Task.objects.filter(pk=task.pk).update(
        command=command, spec={"image": IMAGE}, time_limit_s=2, array=array, array_index=1
    )
    run_until(daemon, lambda: timed_out(task.pk), timeout=60)
    done = Task.objects.get(pk=task.pk)
    assert done.exit_code == 143 and "limit=2 index=1" in done.log.tail
    assert (done.ended_at - done.started_at).total_seconds() >= 2


def test_time_limit_docker_mode_a_container_ignoring_sigterm_is_killed_after_the_grace(
    docker_daemon, pool, place
):
    daemon = docker_daemon()
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(
        command="trap '' TERM; sleep 60", spec={"image": IMAGE}, time_limit_s=1
    )
    run_until(daemon, lambda: timed_out(task.pk), timeout=60)
    assert Task.objects.get(pk=task.pk).exit_code == 137
