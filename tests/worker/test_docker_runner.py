"""Docker mode against a real Docker API (Podman's service, tests/worker/docker_dev.py): what a
task's container gets (env, labels, checkpoint folder, memory and CPU limits), how it ends (exit
code, log tail, SIGTERM, SIGKILL, removed behind the daemon's back), re-adoption by a new runner,
and start failures that recur (bad or missing image) against those of the host (no Docker daemon).
Podman here has no GPUs: the GPU device request is checked as it would be sent."""

import time

import docker
import pytest
from django.utils import timezone
from docker.types import DeviceRequest

from apps.engine import services as engine
from apps.ledger.models import UsageInterval
from apps.pools import services
from apps.pools.models import EnrolmentToken
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from klique.worker.client import ControlPlane
from klique.worker.daemon import Daemon, Settings
from klique.worker.docker.containers import WORKER
from klique.worker.docker.runner import ENDED, DockerRunner
from klique.worker.runs import StartFailed
from tests.worker import docker_dev
from tests.worker.conftest import run_until, submit
from tests.worker.docker_dev import IMAGE

docker_host, docker_client = docker_dev.docker_host, docker_dev.docker_client
make_runner = docker_dev.make_runner


def task(task_id: int, command: str, gpus: str = "1.000", pool: str = "1", **extra) -> dict:
    return {
        "id": task_id,
        "command": command,
        "gpus": gpus,
        "spec": extra.pop("spec", {"env": {"EPOCHS": 3, "bad name": "x"}}),
        "labels": {"task": str(task_id), "pool": pool, "group": "vision", "project": "", "user": "ada"},
        "runtime": {"image": "", "memory_limit_mb": None, "grace_s": 5.0, **extra.pop("runtime", {})},
        **extra,
    }


def wait_for(runner: DockerRunner, task_id: int, kind: str, timeout: float = 90) -> list:
    """Poll until ``task_id`` reports ``kind``; every change it reported on the way. Podman's stop
    and cleanup took over 30 s once under a loaded two-core CI machine (a terminate's exit not seen)."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += [change for change in runner.poll() if change.task_id == task_id]
        if any(change.kind == kind for change in seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"task {task_id}: no {kind!r} within {timeout} s, saw {seen}")


def exit_of(runner: DockerRunner, task_id: int) -> int:
    return next(c.exit_code for c in wait_for(runner, task_id, "exited") if c.kind == "exited")


def containers(client, runner: DockerRunner) -> list[dict]:
    return client.api.containers(all=True, filters={"label": [f"{WORKER}={runner.tag}"]})


def output(runner: DockerRunner, task_id: int) -> dict[str, str]:
    lines = runner.log_tail(task_id).splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_the_container_sees_its_spec_env_klique_variables_and_checkpoint_folder(make_runner, tmp_path):
    runner = make_runner()
    runner.start(task(5, "env; echo saved > $KLIQUE_CHECKPOINT_DIR/state"), ["GPU-a", "GPU-b"])
    assert exit_of(runner, 5) == 0
    env = output(runner, 5)
    assert env["EPOCHS"] == "3" and "bad name" not in env
    assert env["KLIQUE_TASK_ID"] == "5" and env["KLIQUE_GPUS"] == "1.000"
    assert env["KLIQUE_PREEMPTION_COUNT"] == "0" and env["KLIQUE_CHECKPOINT_DIR"] == "/klique/checkpoint"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a,GPU-b" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (tmp_path / "checkpoints" / "5" / "state").read_text() == "saved\n"


def test_the_container_is_named_and_labelled_for_the_worker_task_group_project_and_user(
    make_runner, docker_client
):
    runner = make_runner()
    runner.start(task(6, "sleep 60"), [])
    wait_for(runner, 6, "running")
    [found] = containers(docker_client, runner)
    assert found["Names"] == [f"/klique-6-{runner.tag}"]
    labels = found["Labels"]
    assert labels[WORKER] == runner.tag and labels["klique.io/task"] == "6"
    assert labels["klique.io/pool"] == "1"
    assert labels["klique.io/group"] == "vision" and labels["klique.io/user"] == "ada"
    assert labels["klique.io/project"] == ""
    runner.kill(6)
    wait_for(runner, 6, "exited")


MEMORY_LIMIT = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"


def test_a_fraction_of_a_gpu_is_capped_at_the_profiles_memory_limit(make_runner):
    runner = make_runner()
    runner.start(task(7, MEMORY_LIMIT, gpus="0.500", runtime={"memory_limit_mb": 64}), ["GPU-a"])
    assert exit_of(runner, 7) == 0
    assert runner.log_tail(7).split() == [str(64 * 1024 * 1024)]


def test_a_whole_gpu_is_not_capped_by_the_profiles_memory_limit(make_runner):
    runner = make_runner()
    runner.start(task(8, MEMORY_LIMIT, gpus="1.000", runtime={"memory_limit_mb": 64}), ["GPU-a"])
    assert exit_of(runner, 8) == 0
    limit = runner.log_tail(8).split()[0]
    assert limit == "max" or int(limit) > 1024**3


def test_the_specs_memory_and_cpu_become_the_containers_limits(make_runner):
    runner = make_runner()
    quota = "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max"
    spec = {"resources": {"memory": "32Mi", "cpu": "500m"}}
    runner.start(task(9, f"{MEMORY_LIMIT}; {quota}", gpus="0", spec=spec), [])
    assert exit_of(runner, 9) == 0
    assert runner.log_tail(9).split() == [str(32 * 1024 * 1024), "50000"]


def test_a_fraction_takes_the_smaller_of_its_spec_memory_and_the_profile_cap(make_runner):
    runner = make_runner()
    one = task(
        10, MEMORY_LIMIT, gpus="0.250", spec={"resources": {"memory": "1Gi"}}, runtime={"memory_limit_mb": 48}
    )
    runner.start(one, ["GPU-a"])
    assert exit_of(runner, 10) == 0
    assert runner.log_tail(10).split() == [str(48 * 1024 * 1024)]


def test_the_exit_code_and_log_tail_are_read_and_the_container_removed(make_runner, docker_client):
    runner = make_runner()
    runner.start(task(11, "echo hello from the task; exit 3"), [])
    changes = wait_for(runner, 11, "exited")
    assert [change.kind for change in changes] == ["running", "exited"]
    assert changes[-1].exit_code == 3
    assert "hello from the task" in runner.log_tail(11)
    assert containers(docker_client, runner) == []


def test_terminate_sends_sigterm_that_the_task_can_handle(make_runner):
    runner = make_runner()
    runner.start(
        task(12, "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.1; done"), []
    )
    wait_for(runner, 12, "running")
    deadline = time.monotonic() + 10
    while "ready" not in runner.log_tail(12):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    runner.terminate(12, 5.0)
    assert exit_of(runner, 12) == 0
    assert "got TERM" in runner.log_tail(12)


def test_terminate_stops_a_task_without_a_handler_through_the_containers_init(make_runner):
    runner = make_runner()
    runner.start(task(13, "sleep 60"), [])
    wait_for(runner, 13, "running")
    runner.terminate(13, 5.0)
    assert exit_of(runner, 13) == 143


def test_kill_ends_a_task_that_ignores_sigterm_with_137(make_runner):
    runner = make_runner()
    runner.start(task(14, "trap '' TERM; sleep 60"), [])
    wait_for(runner, 14, "running")
    runner.terminate(14, 5.0)
    runner.kill(14)
    assert exit_of(runner, 14) == 137


def test_a_container_removed_behind_the_daemons_back_is_released(make_runner, docker_client):
    runner = make_runner()
    runner.start(task(15, "sleep 60"), [])
    wait_for(runner, 15, "running")
    docker_client.api.remove_container(f"klique-15-{runner.tag}", force=True)
    released = wait_for(runner, 15, "released")[-1]
    assert released.detail["reason"] == "the container was removed"


def test_a_new_runner_recovers_the_containers_adopts_some_and_removes_only_those_dropped(
    make_runner, docker_client
):
    """After a restart the runner finds every container of its tag with its pool: it follows the
    adopted (one that ended meanwhile reports its exit code), removes the dropped, and leaves
    another pool's (a daemon of the same hostname in another pool) alone."""
    first = make_runner()
    work = [(21, "sleep 60", "1"), (22, "sleep 60", "1"), (23, "exit 3", "1"), (25, "sleep 60", "2")]
    for task_id, command, pool in work:
        first.start(task(task_id, command, pool=pool), [])
    deadline = time.monotonic() + 60
    while {c["Names"][0]: c["State"] for c in containers(docker_client, first)}.get(
        f"/klique-23-{first.tag}"
    ) not in ENDED:  # Podman lists "stopped" until its cleanup process has run, "exited" after
        assert time.monotonic() < deadline
        time.sleep(0.05)

    second = make_runner(tag=first.tag)
    found = second.recover()
    assert found == {21: "1", 22: "1", 23: "1", 25: "2"}
    drop = [task_id for task_id, pool in found.items() if pool in ("", "1") and task_id not in (21, 23)]
    second.adopt([task(21, "sleep 60"), task(23, "exit 3")], drop=drop)
    assert sorted(c["Names"][0] for c in containers(docker_client, second)) == [
        f"/klique-21-{first.tag}",
        f"/klique-23-{first.tag}",
        f"/klique-25-{first.tag}",
    ]
    assert exit_of(second, 23) == 3  # ended while no daemon followed it: its exit is still reported
    time.sleep(0.6)
    assert [c.kind for c in second.poll()] == []  # adopted work is running already: no second "running"
    second.terminate(21, 5.0)
    assert exit_of(second, 21) == 143
    assert [c["Names"][0] for c in containers(docker_client, second)] == [f"/klique-25-{first.tag}"]


def test_a_task_adopted_without_its_container_is_released(make_runner):
    runner = make_runner()
    assert runner.recover() == {}
    runner.adopt([task(24, "sleep 60")], drop=[])
    assert [(c.task_id, c.kind) for c in runner.poll()] == [(24, "released")]


def test_a_bad_image_reference_fails_the_start_for_good(make_runner):
    runner = make_runner()
    with pytest.raises(StartFailed) as failed:
        runner.start(task(31, "true", runtime={"image": "UPPER/Bad::name"}), [])
    assert failed.value.recurs and "invalid reference format" in str(failed.value)


def test_an_image_not_here_fails_for_good_when_the_worker_never_pulls(make_runner):
    runner = make_runner(pull="never")
    with pytest.raises(StartFailed) as failed:
        runner.start(task(32, "true", runtime={"image": "localhost/klique-missing:1"}), [])
    assert failed.value.recurs and "localhost/klique-missing:1 is not on this host" in str(failed.value)


def test_an_image_that_cannot_be_pulled_fails_the_task_with_the_reason(make_runner):
    runner = make_runner()
    runner.start(task(33, "true", runtime={"image": "127.0.0.1:9/klique/missing:1"}), [])
    failed = wait_for(runner, 33, "failed", timeout=60)[-1]
    assert "pulling 127.0.0.1:9/klique/missing:1" in failed.detail["error"]


def test_a_task_stopped_while_its_image_is_pulled_never_starts_and_is_released(make_runner, docker_client):
    runner = make_runner()
    runner.start(task(37, "true", runtime={"image": "127.0.0.1:9/klique/missing:2"}), [])
    runner.terminate(37, 5.0)
    released = wait_for(runner, 37, "released", timeout=60)[-1]
    assert released.detail["reason"] == "stopped while pulling"
    assert containers(docker_client, runner) == []


def test_a_task_with_no_image_anywhere_fails_for_good(make_runner):
    runner = make_runner(image="")
    with pytest.raises(StartFailed) as failed:
        runner.start(task(34, "true"), [])
    assert failed.value.recurs and "no image" in str(failed.value)


def test_a_bad_quantity_in_the_spec_fails_for_good(make_runner):
    runner = make_runner()
    with pytest.raises(StartFailed) as failed:
        runner.start(task(35, "true", spec={"resources": {"memory": "lots"}}), [])
    assert failed.value.recurs and "spec.resources.memory" in str(failed.value)


def test_a_docker_daemon_that_does_not_answer_is_this_hosts_trouble(tmp_path):
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/nothing.sock", version="1.41", timeout=5)
    runner = DockerRunner(client, tmp_path / "ck", tag="lost", image=IMAGE, gpus="none")
    with pytest.raises(StartFailed) as failed:
        runner.start(task(36, "true"), [])
    assert not failed.value.recurs


def test_gpus_go_as_an_nvidia_device_request_for_the_claimed_devices_only_with_the_nvidia_runtime(
    make_runner, tmp_path
):
    with_nvidia, without = make_runner(gpus="nvidia"), make_runner(gpus="none")
    config = with_nvidia.config(task(41, "true"), ["0", "2"], IMAGE, tmp_path)
    assert config["device_requests"] == [
        DeviceRequest(driver="nvidia", device_ids=["0", "2"], capabilities=[["gpu"]])
    ]
    assert config["environment"]["NVIDIA_VISIBLE_DEVICES"] == "0,2"
    assert "device_requests" not in without.config(task(41, "true"), ["0", "2"], IMAGE, tmp_path)
    no_gpu = with_nvidia.config(task(42, "true", gpus="0"), [], IMAGE, tmp_path)
    assert "device_requests" not in no_gpu and no_gpu["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_podman_here_has_no_nvidia_runtime_so_auto_hands_out_no_gpus(make_runner):
    assert make_runner(gpus="auto").nvidia is False


def test_poll_lists_the_workers_containers_at_most_every_half_second(make_runner, docker_client):
    now = [100.0]
    runner = make_runner(clock=lambda: now[0])
    runner.start(task(51, "sleep 60"), [])
    listed = []
    listing = runner.api.containers
    runner.api.containers = lambda **kwargs: listed.append(kwargs) or listing(**kwargs)
    for _ in range(5):
        runner.poll()
    now[0] += 0.5
    runner.poll()
    assert listed == [{"all": True, "filters": {"label": [f"{WORKER}={runner.tag}"]}}] * 2
    runner.kill(51)


@pytest.fixture
def docker_daemon(pool, network, fast, docker_client, tmp_path):
    """A daemon in Docker mode (two GPUs, Podman has none to give) enrolled in ``pool``; call it
    again for a new daemon of the same host, as after a restart."""
    raw = services.issue_enrolment_token(EnrolmentToken(pool=pool, name="docker"), now=timezone.now())
    tag = f"gpu-box-{tmp_path.name}".replace("_", "-")  # a host name (RFC 1123): no "_"

    def make() -> Daemon:
        runner = DockerRunner(docker_client, tmp_path / "checkpoints", tag=tag, gpus="none")
        settings = Settings(
            hostname=tag,
            enrolment_token=raw,
            devices=["0", "1"],
            poll_min_s=0.05,
            poll_max_s=0.2,
            retry_max_s=0.5,
            tick_s=0.02,
        )
        daemon = Daemon(settings, ControlPlane("http://testserver", transport=network), runner)
        daemon.found = runner.recover()
        daemon.enrol()
        return daemon

    yield make
    for item in docker_client.api.containers(all=True, filters={"label": [f"{WORKER}={tag}"]}):
        docker_client.api.remove_container(item["Id"], force=True)


RESUMABLE = (
    'if [ "$KLIQUE_PREEMPTION_COUNT" -gt 0 ]; then echo resumed; exit 0; fi; '
    "trap 'echo SIGTERM: saving a checkpoint; exit 0' TERM; echo epoch 1; "
    "while true; do sleep 0.1; done"
)


def task_state(pk: int) -> str:
    return Task.objects.get(pk=pk).state


@pytest.mark.django_db
def test_a_submitted_task_runs_as_a_container_is_preempted_requeued_and_charged_per_run(
    docker_daemon, estate, docker_client
):
    resource, token = estate
    resource.profile.image, resource.profile.stop_grace_s = IMAGE, 20
    resource.profile.save()
    daemon = docker_daemon()
    pk = submit(token, resource, RESUMABLE)
    engine.run_pass()
    run_until(daemon, lambda: task_state(pk) == Task.State.RUNNING, timeout=30)
    [container] = docker_client.api.containers(filters={"label": [f"klique.io/task={pk}"]})
    assert container["Image"] == IMAGE and container["Labels"]["klique.io/group"] == "vision"
    assert Task.objects.get(pk=pk).events.get(kind="started").detail["container"] == container["Names"][0][1:]

    lifecycle.request_stop_many([Task.objects.get(pk=pk)], Task.StopReason.RECLAIM, timezone.now())
    run_until(daemon, lambda: task_state(pk) == Task.State.QUEUED, timeout=30)
    preempted = Task.objects.get(pk=pk)
    assert preempted.preemption_count == 1 and "SIGTERM: saving a checkpoint" in preempted.log.tail

    engine.run_pass()
    run_until(daemon, lambda: task_state(pk) == Task.State.SUCCEEDED, timeout=30)
    done = Task.objects.get(pk=pk)
    assert done.exit_code == 0 and "resumed" in done.log.tail
    kinds = list(done.events.order_by("pk").values_list("kind", flat=True))
    assert kinds == [
        "submitted", "placed", "claimed", "started", "preempted", "requeued",
        "placed", "claimed", "started", "succeeded",
    ]  # fmt: skip
    intervals = list(UsageInterval.objects.filter(task_id=pk).order_by("start"))
    assert len(intervals) == 2 and all(interval.end is not None for interval in intervals)
    assert docker_client.api.containers(all=True, filters={"label": [f"klique.io/task={pk}"]}) == []


@pytest.mark.django_db
def test_a_restarted_daemon_adopts_the_running_container_and_the_meter_keeps_running(
    docker_daemon, estate, docker_client
):
    resource, token = estate
    resource.profile.image = IMAGE
    resource.profile.save()
    first = docker_daemon()
    waits = "echo epoch 1; while [ ! -e $KLIQUE_CHECKPOINT_DIR/done ]; do sleep 0.1; done"
    pk = submit(token, resource, waits)
    engine.run_pass()
    run_until(first, lambda: task_state(pk) == Task.State.RUNNING, timeout=30)
    first.client.close()  # the daemon is gone; its container keeps running

    second = docker_daemon()
    assert second.held[pk].started and pk not in second.runner.recovered
    [container] = docker_client.api.containers(filters={"label": [f"klique.io/task={pk}"]})
    checkpoint = second.runner.checkpoint_root / str(pk) / "done"
    checkpoint.write_text("")
    run_until(second, lambda: task_state(pk) == Task.State.SUCCEEDED, timeout=30)
    done = Task.objects.get(pk=pk)
    assert "epoch 1" in done.log.tail
    events = list(done.events.order_by("pk").values_list("kind", "reason"))
    assert events == [
        ("submitted", ""), ("placed", ""), ("claimed", ""), ("started", ""),
        ("claimed", "adopted"), ("succeeded", ""),
    ]  # fmt: skip
    assert UsageInterval.objects.filter(task_id=pk).count() == 1
    assert container["Id"] and not docker_client.api.containers(all=True, filters={"id": [container["Id"]]})


def test_klique_worker_mode_docker_builds_its_runner_from_flags(docker_host, tmp_path):
    from klique.worker import cli

    args = cli.parser().parse_args(
        ["--mode", "docker", "--docker-host", docker_host, "--docker-image", IMAGE, "--docker-gpus", "auto"]
    )
    runner = cli.runner_class("docker").from_args(
        args, state_dir=tmp_path, checkpoint_root=tmp_path / "ck", hostname="gpu box 1"
    )
    assert (runner.tag, runner.image, runner.pull_policy) == ("gpu-box-1", IMAGE, "missing")
    assert runner.nvidia is False
    assert runner.recover() == {}


def test_klique_worker_mode_docker_says_so_when_no_docker_api_answers(tmp_path):
    from klique.worker import cli

    args = cli.parser().parse_args(["--mode", "docker", "--docker-host", f"unix://{tmp_path}/none.sock"])
    with pytest.raises(SystemExit, match="no Docker API at unix://"):
        cli.runner_class("docker").from_args(
            args, state_dir=tmp_path, checkpoint_root=tmp_path / "ck", hostname="h"
        )
