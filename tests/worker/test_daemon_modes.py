"""What the daemon does the same for every worker mode, through the runner interface: it names the
work an earlier daemon left at enrolment and follows what the control plane hands back, claims by
total where the pool's scheduler picks the GPUs, counts a multi-node task's GPUs on every node,
reports work that can never run as ``start_failed``, stops with the grace each command gives, and
on request leaves its work running at exit for the next daemon."""

import random

from klique.worker.daemon import Daemon, Settings
from klique.worker.runs import Change
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task


class TotalRunner(RecordingRunner):
    mode = "kubernetes"
    claims_total = True
    multi_node = True


def make(runner=None, gpus=4, claims=(), **settings):
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=claims, heartbeat_s=1000)
    daemon = Daemon(
        Settings(hostname="h", enrolment_token="kqe_x", devices=[str(i) for i in range(gpus)], **settings),
        control,
        runner or RecordingRunner(),
        clock=clock,
        rng=random.Random(1),
    )
    return daemon, control, clock


def calls(control, what):
    return [body for kind, _, body in control.calls if kind == what]


def test_work_left_by_an_earlier_daemon_is_named_at_enrolment_and_what_comes_back_is_followed():
    runner = RecordingRunner(found=[7, 8])
    daemon, control, _ = make(runner)
    control.adopted = [{**task(7, gpus="2"), "slots": [1, 2]}]
    daemon.found = runner.recover()
    daemon.enrol()
    assert calls(control, "enrol")[0]["running"] == [7, 8]
    assert runner.adopted == [7] and runner.dropped == [8]
    assert daemon.held[7].started and daemon.held[7].slots == [1, 2]
    assert daemon.free == [1000, 0, 0, 1000]


def test_an_adopted_task_is_in_the_next_heartbeat_so_the_control_plane_keeps_it():
    daemon, control, clock = make(RecordingRunner(found=[7]))
    control.adopted = [task(7)]
    daemon.found = [7]
    daemon.enrol()
    daemon.tick()
    assert calls(control, "heartbeat")[0]["tasks"] == [7]


def test_a_runner_whose_scheduler_picks_the_gpus_claims_by_total_and_says_it_runs_multi_node_work():
    daemon, control, _ = make(TotalRunner(), gpus=8, max_claim=4)
    daemon.enrol()
    daemon.tick()
    (body,) = calls(control, "claim")
    assert body == {"free_gpus": "8", "max_tasks": 4, "multi_node": True}


def test_a_runner_of_slots_claims_per_gpu_and_not_multi_node_work():
    daemon, control, _ = make(gpus=2)
    daemon.enrol()
    daemon.tick()
    (body,) = calls(control, "claim")
    assert body == {"slots": ["1", "1"], "max_tasks": 8}


def test_a_multi_node_task_takes_its_gpus_on_every_node():
    runner = TotalRunner()
    daemon, control, _ = make(runner, gpus=8, claims=[[{**task(5, gpus="2"), "nodes": 3}]])
    daemon.enrol()
    daemon.tick()
    assert runner.started == [5]
    assert daemon.free_gpus() == "2"


def test_work_that_can_never_run_here_is_reported_as_start_failed_with_the_reason():
    runner = TotalRunner()
    daemon, control, clock = make(runner, claims=[[task(5)]])
    daemon.enrol()
    daemon.tick()
    runner.changes = [
        Change(5, "failed", detail={"error": "0/3 nodes are available: Insufficient nvidia.com/gpu"})
    ]
    clock.now += 1
    daemon.tick()
    assert (
        calls(control, "start_failed")[0]["error"] == "0/3 nodes are available: Insufficient nvidia.com/gpu"
    )
    assert daemon.free_gpus() == "4" and 5 not in daemon.held


def test_a_stop_command_hands_its_grace_to_the_runner():
    runner = RecordingRunner()
    daemon, control, clock = make(runner, claims=[[task(5)]])
    daemon.enrol()
    daemon.tick()
    runner.changes = [Change(5, "running")]
    control.commands = [{"stop": 5, "reason": "preempted", "grace_s": 45}]
    clock.now += 2000
    daemon.tick()
    assert runner.terminated == [(5, 45.0)]


def test_at_exit_the_work_is_left_running_for_the_next_daemon_when_asked():
    runner = RecordingRunner()
    daemon, _, _ = make(runner, claims=[[task(5)]], keep_work_on_exit=True)
    daemon.enrol()
    daemon.tick()
    daemon.shutdown()
    assert runner.terminated == [] and daemon.drained()


def test_at_exit_the_work_is_stopped_by_default():
    runner = RecordingRunner()
    daemon, _, _ = make(runner, claims=[[task(5)]], shutdown_grace_s=12)
    daemon.enrol()
    daemon.tick()
    daemon.shutdown()
    assert runner.terminated == [(5, 12)] and not daemon.drained()


def test_a_daemon_that_could_not_enrol_yet_stops_on_sigterm_instead_of_retrying_forever():
    import threading
    import time

    daemon, control, _ = make(retry_max_s=30, tick_s=0.05)
    control.down = True
    result = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not control.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    daemon.shutdown()
    thread.join(timeout=10)
    assert result == [0], "run() returned 0 well within its 30 s backoff"
