"""Rule 1 (time limits) and rule 5 (arrays) in the daemon, without a control plane: the task's
``KLIQUE_TIME_LIMIT_S`` and ``KLIQUE_ARRAY_INDEX``; the daemon's own timer (process and Docker
mode, Kubernetes with the pod deadline as a backstop), which stops work at its limit from its
start, as a preemption is stopped, even while the control plane is unreachable, and reports the end
as an exit that timed out; Slurm's ``--time`` and its TIMEOUT; a pod's DeadlineExceeded."""

import subprocess
from pathlib import Path

import pytest

from klique.worker import slurm
from klique.worker.daemon import Daemon, Settings
from klique.worker.kubernetes.pods import summarise
from klique.worker.runs import Change, StartFailed, task_variables
from klique.worker.slurm import SlurmRunner, slurm_time
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task


def limited(task_id: int, limit: int | None = 60, grace_s: float = 5.0, **extra) -> dict:
    return {**task(task_id), "time_limit_s": limit, "runtime": {"grace_s": grace_s}, **extra}


def daemon(clock, control, runner) -> Daemon:
    settings = Settings(
        hostname="h", enrolment_token="kqe_x", devices=["GPU-0", "GPU-1"], poll_min_s=1, poll_max_s=1
    )
    made = Daemon(settings, control, runner, clock=clock)
    made.enrol()
    return made


def tick_for(d: Daemon, clock: Clock, seconds: float, step: float = 0.5) -> None:
    end = clock.now + seconds
    while clock.now < end:
        d.tick()
        clock.now += step


def reports(control, what: str) -> list[dict]:
    return [body for kind, _, body in control.calls if kind == what]


def running(runner: RecordingRunner, d: Daemon, clock: Clock, task_id: int) -> None:
    """The claimed task's work runs from now."""
    runner.changes.append(Change(task_id, "running"))
    d.tick()


def test_time_limit_and_array_index_are_in_the_tasks_environment(tmp_path):
    variables = task_variables(limited(7, 90, array_index=3), tmp_path)
    assert variables["KLIQUE_TIME_LIMIT_S"] == "90" and variables["KLIQUE_ARRAY_INDEX"] == "3"
    plain = task_variables({**task(8), "time_limit_s": None, "array_index": None}, tmp_path)
    assert "KLIQUE_TIME_LIMIT_S" not in plain and "KLIQUE_ARRAY_INDEX" not in plain
    assert "KLIQUE_TIME_LIMIT_S" not in task_variables(task(9), tmp_path)  # an older control plane


@pytest.mark.parametrize("bad", [{"time_limit_s": 0}, {"time_limit_s": "60"}, {"array_index": -1}])
def test_time_limit_a_limit_or_index_that_cannot_be_read_fails_the_start_for_good(tmp_path, bad):
    with pytest.raises(StartFailed) as failed:
        task_variables({**task(7), **bad}, tmp_path)
    assert failed.value.recurs and next(iter(bad)) in str(failed.value)


def test_time_limit_the_daemon_stops_work_at_its_limit_from_its_start_then_kills_after_the_grace():
    clock, runner = Clock(), RecordingRunner()
    control = ScriptedControlPlane(clock, claims=[[limited(7, 60, grace_s=5)]])
    d = daemon(clock, control, runner)
    tick_for(d, clock, 10)  # claimed, and 10 s before its work runs: not counted
    running(runner, d, clock, 7)
    tick_for(d, clock, 59)
    assert runner.terminated == []
    tick_for(d, clock, 1.5)
    assert runner.terminated == [(7, 5.0)] and runner.killed == []
    tick_for(d, clock, 5)
    assert runner.killed == [7]
    runner.changes.append(Change(7, "exited", 137))
    tick_for(d, clock, 1)
    [sent] = reports(control, "exited")
    assert sent["exit_code"] == 137 and sent["timed_out"] is True
    assert reports(control, "stopped") == [] and d.held == {}


def test_time_limit_work_ending_on_the_sigterm_reports_its_code_and_no_limit_means_no_timer():
    clock, runner = Clock(), RecordingRunner()
    control = ScriptedControlPlane(clock, claims=[[limited(7, 2), limited(8, None)]])
    d = daemon(clock, control, runner)
    d.tick()
    running(runner, d, clock, 7)
    running(runner, d, clock, 8)
    tick_for(d, clock, 3)
    assert runner.terminated == [(7, 5.0)]
    runner.changes.append(Change(7, "exited", 143))
    tick_for(d, clock, 600)
    [sent] = reports(control, "exited")
    assert (sent["exit_code"], sent["timed_out"]) == (143, True)
    assert runner.terminated == [(7, 5.0)] and 8 in d.held


def test_time_limit_the_daemon_stops_work_at_its_limit_while_the_control_plane_is_unreachable():
    clock, runner = Clock(), RecordingRunner()
    control = ScriptedControlPlane(clock, claims=[[limited(7, 30)]])
    d = daemon(clock, control, runner)
    d.tick()
    running(runner, d, clock, 7)
    control.down = True
    tick_for(d, clock, 31)
    assert runner.terminated == [(7, 5.0)]
    runner.changes.append(Change(7, "exited", 143))
    tick_for(d, clock, 5)
    assert [(r.what, r.body["timed_out"]) for r in d.reports] == [("exited", True)]  # kept till it answers
    control.down = False
    tick_for(d, clock, 60)
    assert [body["timed_out"] for body in reports(control, "exited")][-1] is True and not d.reports


def test_time_limit_a_stop_command_after_the_limit_leaves_it_an_exit_that_timed_out():
    clock, runner = Clock(), RecordingRunner()
    control = ScriptedControlPlane(clock, claims=[[limited(7, 10)]])
    d = daemon(clock, control, runner)
    d.tick()
    running(runner, d, clock, 7)
    tick_for(d, clock, 11)
    d.stop(7, "preempted", 30.0, clock.now)
    assert runner.terminated == [(7, 5.0)]
    runner.changes.append(Change(7, "exited", 143))
    tick_for(d, clock, 1)
    assert reports(control, "exited")[0]["timed_out"] is True and reports(control, "stopped") == []


def test_time_limit_work_stopped_before_its_limit_is_reported_stopped_as_before():
    clock, runner = Clock(), RecordingRunner()
    control = ScriptedControlPlane(clock, claims=[[limited(7, 10)]])
    d = daemon(clock, control, runner)
    d.tick()
    running(runner, d, clock, 7)
    d.stop(7, "preempted", 30.0, clock.now)
    tick_for(d, clock, 20)
    assert runner.terminated == [(7, 30.0)]
    runner.changes.append(Change(7, "exited", 143))
    tick_for(d, clock, 1)
    assert len(reports(control, "stopped")) == 1 and reports(control, "exited") == []


def test_time_limit_adopted_work_is_stopped_when_what_is_left_of_its_run_is_over():
    clock, runner = Clock(), RecordingRunner(found=[7])
    control = ScriptedControlPlane(clock)
    control.adopted = [limited(7, 20)]
    d = daemon(clock, control, runner)
    tick_for(d, clock, 19)
    assert runner.terminated == []
    tick_for(d, clock, 1.5)
    assert runner.terminated == [(7, 5.0)]


class SlurmLike(RecordingRunner):
    limits_time = True


def test_time_limit_where_the_scheduler_enforces_it_the_daemon_keeps_no_timer_and_reports_its_end():
    clock, runner = Clock(), SlurmLike()
    control = ScriptedControlPlane(clock, claims=[[limited(7, 10)]])
    d = daemon(clock, control, runner)
    d.tick()
    running(runner, d, clock, 7)
    tick_for(d, clock, 30)
    assert runner.terminated == []
    runner.changes.append(Change(7, "exited", 143, {"slurm_state": "TIMEOUT"}, timed_out=True))
    tick_for(d, clock, 1)
    [sent] = reports(control, "exited")
    assert (sent["exit_code"], sent["timed_out"]) == (143, True)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(1, "00:00:01"), (90, "00:01:30"), (3600, "01:00:00"), (86_399, "23:59:59"), (90_061, "1-01:01:01")],
)
def test_time_limit_slurm_time_is_hh_mm_ss_or_d_hh_mm_ss(seconds, expected):
    assert slurm_time(seconds) == expected


class FakeSlurm:
    """Records sbatch's arguments; squeue answers job 7 in ``state`` with ``status``."""

    def __init__(self):
        self.sbatch: list[str] = []
        self.state, self.status = "RUNNING", 0

    def __call__(self, args, **kwargs):
        out = ""
        if args[0] == "sbatch":
            self.sbatch, out = list(args), "7\n"
        elif args[0] == "squeue":
            out = f"7 {self.state} {self.status}\n"
        return subprocess.CompletedProcess(args, 0, out, "")


@pytest.fixture
def fake_slurm(monkeypatch):
    answers = FakeSlurm()
    monkeypatch.setattr(slurm.subprocess, "run", answers)
    return answers


def test_time_limit_slurm_passes_it_as_sbatch_time_after_the_workers_own_arguments(tmp_path, fake_slurm):
    runner = SlurmRunner(tmp_path, tmp_path / "ckpt", tag="t", extra_args=("--time=24:00:00",))
    runner.start(limited(7, 5400, array_index=1), [])
    assert fake_slurm.sbatch[-2:] == ["--time=01:30:00", str(tmp_path / "tasks" / "7" / "job.sh")]
    script = Path(fake_slurm.sbatch[-1]).read_text()
    assert "export KLIQUE_TIME_LIMIT_S=5400" in script and "export KLIQUE_ARRAY_INDEX=1" in script
    runner.start(limited(8, None), [])
    assert not [arg for arg in fake_slurm.sbatch if arg.startswith("--time")][1:]
    assert "--time=24:00:00" in fake_slurm.sbatch  # the worker's default for tasks without a limit


def test_time_limit_a_slurm_job_ended_timeout_is_an_exit_that_timed_out(tmp_path, fake_slurm):
    runner = SlurmRunner(tmp_path, tmp_path / "ckpt", tag="t")
    runner.start(limited(7, 60), [])
    assert [c.kind for c in runner.poll()] == ["running"]
    fake_slurm.state, fake_slurm.status = "TIMEOUT", 15  # SIGTERM at the limit
    [ended] = runner.poll()
    assert (ended.kind, ended.exit_code, ended.timed_out) == ("exited", 143, True)
    runner.start(limited(9, 60), [])
    fake_slurm.state, fake_slurm.status = "TIMEOUT", 0  # as sacct may record it
    assert [(c.kind, c.exit_code, c.timed_out) for c in runner.poll()] == [
        ("running", None, False),
        ("exited", 143, True),
    ]
    runner.start(limited(8, 60), [])
    fake_slurm.state, fake_slurm.status = "FAILED", 1 << 8
    assert [(c.kind, c.timed_out) for c in runner.poll()] == [("running", False), ("exited", False)]


def test_time_limit_a_pod_failed_at_its_deadline_is_an_end_not_the_pool_taking_it_back():
    container = {"name": "task", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
    status = {"phase": "Failed", "reason": "DeadlineExceeded", "containerStatuses": [container]}
    seen = summarise({"metadata": {"uid": "u"}, "spec": {}, "status": status})
    assert (seen.deadline, seen.disrupted, seen.exit_code) == (True, False, 137)
    bare = summarise({"status": {"phase": "Failed", "reason": "DeadlineExceeded", "message": "too long"}})
    assert (bare.deadline, bare.disrupted, bare.exit_code, bare.message) == (True, False, 143, "too long")
    evicted = summarise({"status": {"phase": "Failed", "reason": "Evicted"}})
    assert evicted.disrupted and not evicted.deadline


def _limit(task, seconds: int, command: str, **fields) -> None:
    from apps.tasks.models import Task

    Task.objects.filter(pk=task.pk).update(time_limit_s=seconds, command=command, **fields)


@pytest.mark.django_db
def test_time_limit_process_mode_a_real_sleep_is_stopped_at_its_limit_and_ends_timed_out(
    make_daemon, pool, place, tmp_path
):
    from apps.tasks.models import Task, TaskArray
    from tests.worker.conftest import run_until

    daemon = make_daemon()
    (task,) = place(pool)
    array = TaskArray.objects.create(user=task.user, size=4)
    seen = tmp_path / "env"
    command = f'echo "$KLIQUE_TIME_LIMIT_S $KLIQUE_ARRAY_INDEX" > {seen}; sleep 30'
    _limit(task, 2, command, array=array, array_index=3)
    run_until(daemon, lambda: Task.objects.get(pk=task.pk).state == Task.State.TIMED_OUT, timeout=20)
    done = Task.objects.get(pk=task.pk)
    assert seen.read_text().split() == ["2", "3"]
    assert done.exit_code == 143  # SIGTERM at the limit
    ran = (done.ended_at - done.started_at).total_seconds()
    assert 2 <= ran < 2 + 1 + 2  # the limit, within the grace (1 s here) and a tick or two
    kinds = list(done.events.order_by("pk").values_list("kind", flat=True))
    assert kinds == ["submitted", "placed", "claimed", "started", "timed_out"]
    assert daemon.held == {} and daemon.free == [1000, 1000]


@pytest.mark.django_db
def test_time_limit_process_mode_work_ignoring_sigterm_is_killed_after_the_grace(make_daemon, pool, place):
    from apps.tasks.models import Task
    from tests.worker.conftest import run_until

    daemon = make_daemon()
    (task,) = place(pool)
    _limit(task, 1, "trap '' TERM; while true; do sleep 0.05; done")
    run_until(daemon, lambda: Task.objects.get(pk=task.pk).state == Task.State.TIMED_OUT, timeout=20)
    done = Task.objects.get(pk=task.pk)
    assert done.exit_code == 137
    assert 2 <= (done.ended_at - done.started_at).total_seconds() < 5  # limit 1 s + grace 1 s


def test_time_limit_a_refused_exit_is_sent_again_reduced_but_still_timed_out():
    from klique.worker.reports import Report

    sent = Report(
        7, "exited", {"exit_code": 143, "timed_out": True, "at": "2026-01-01T00:00:00Z", "log_tail": "x"}
    )
    assert sent.reduced().body == {"exit_code": 143, "timed_out": True, "at": "2026-01-01T00:00:00Z"}
    assert sent.reduced().reduced().body == {"exit_code": 143, "timed_out": True}
