"""What the daemon does the same for every worker mode, through the runner interface: it names the
work an earlier daemon left at enrolment, follows what the control plane hands back on the GPUs it
was claimed on and removes only its own pool's rest, claims by total where the pool's scheduler
picks the GPUs and books each task out of that total, counts a multi-node task's GPUs on every
node (whole GPUs where the scheduler allocates whole GPUs), reports work that can never run or
cannot be read as ``start_failed``, stops with the grace each command gives and kills again a run
a kill did not end, and on request leaves its work running at exit for the next daemon."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from klique.worker.daemon import Daemon, Settings
from klique.worker.runs import Change
from klique.worker.slots import milli
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task


class TotalRunner(RecordingRunner):
    mode = "kubernetes"
    claims_total = True
    multi_node = True
    whole_gpus = False


class WholeGpuRunner(TotalRunner):
    mode = "slurm"
    whole_gpus = True


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
    daemon.found = {7: ""}
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
    assert body == {"slots": ["1", "1"], "max_tasks": 100}


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


def test_only_work_of_this_pool_or_of_no_pool_is_removed_at_enrolment():
    """Two pools' daemons may share a hostname (and so a worker tag): what the runner found of
    another pool is neither adopted nor removed."""
    runner = RecordingRunner(found={7: "1", 8: "1", 9: "2", 10: ""})
    daemon, control, _ = make(runner)
    control.adopted = [task(7)]
    daemon.found = runner.recover()
    daemon.enrol()
    assert calls(control, "enrol")[0]["running"] == [7, 8, 9, 10]
    assert runner.adopted == [7] and runner.dropped == [8, 10]


def test_a_claiming_by_total_daemon_books_each_task_out_of_its_free_total():
    """0.5 and 0.6 leave 0.9 free over two GPUs; the control plane may hand a 0.7 for it, and the
    free total then falls to 0.2, never above what is really free."""
    runner = TotalRunner()
    daemon, control, clock = make(
        runner, gpus=2, claims=[[task(1, "0.5")], [task(2, "0.6")], [task(3, "0.7")]]
    )
    daemon.enrol()
    for _ in range(4):
        daemon.tick()
        clock.now += 100
    assert runner.started == [1, 2, 3]
    assert daemon.free_gpus() == "0.2" and calls(control, "claim")[-1]["free_gpus"] == "0.2"
    runner.changes = [Change(task_id, "exited", exit_code=0) for task_id in (1, 2, 3)]
    daemon.tick()
    assert daemon.free == [1000, 1000]


def test_work_split_over_two_partly_used_gpus_is_counted_and_a_full_worker_reports_none_free():
    runner = TotalRunner()
    daemon, control, clock = make(
        runner, gpus=2, claims=[[task(1, "0.6")], [task(2, "0.6")], [task(3, "0.8")]]
    )
    daemon.enrol()
    for _ in range(3):
        daemon.tick()
        clock.now += 100
    assert runner.started == [1, 2, 3] and daemon.free == [0, 0]
    daemon.next_heartbeat = 0
    daemon.tick()
    assert calls(control, "heartbeat")[-1]["free_gpus"] == "0"
    assert [body["free_gpus"] for body in calls(control, "claim")] == ["2", "1.4", "0.8"], (
        "a full worker asks for nothing"
    )


def test_a_fraction_on_two_nodes_takes_two_whole_gpus_where_the_scheduler_allocates_whole_gpus():
    runner = WholeGpuRunner()
    daemon, _, _ = make(runner, gpus=4, claims=[[{**task(1, "0.5"), "nodes": 2}]])
    daemon.enrol()
    daemon.tick()
    assert runner.started == [1] and daemon.free_gpus() == "2"
    assert daemon.size({**task(2, "1.5"), "nodes": 3}) == 6000


def test_a_claimed_task_whose_nodes_or_gpus_cannot_be_read_is_a_start_failure_not_a_crash():
    odd = [
        {**task(1), "nodes": "two"},
        {**task(2), "nodes": 0},
        {**task(3), "gpus": "x"},
        {**task(4), "gpus": None},
    ]
    runner = TotalRunner()
    daemon, control, clock = make(runner, claims=[odd, [task(5)]])
    daemon.enrol()
    daemon.tick()
    clock.now += 100
    daemon.tick()
    failed = [(body["error"]) for kind, _, body in control.calls if kind == "start_failed"]
    assert len(failed) == 4 and all("could not read this task" in error for error in failed)
    assert runner.started == [5] and daemon.free_gpus() == "3"


def test_an_adopted_task_that_cannot_be_read_is_removed_and_enrolment_goes_on():
    runner = TotalRunner(found=[1, 2])
    daemon, control, clock = make(runner)
    control.adopted = [{**task(1), "nodes": None, "gpus": "x"}, task(2)]
    daemon.found = runner.recover()
    daemon.enrol()
    assert runner.adopted == [2] and runner.dropped == [1]
    daemon.tick()
    assert calls(control, "heartbeat")[0]["tasks"] == [2]


def test_a_multi_node_task_needs_at_least_one_node():
    daemon, _, _ = make(TotalRunner())
    for nodes in (0, -1, 1.5, True, "2"):
        try:
            daemon.size({**task(1), "nodes": nodes})
        except ValueError:
            continue
        raise AssertionError(f"nodes {nodes!r} was accepted")


def test_a_kill_that_did_not_end_the_work_is_sent_again_every_poll_max_until_it_ends():
    runner = RecordingRunner()
    daemon, control, clock = make(runner, claims=[[task(5)]], poll_max_s=10)
    daemon.enrol()
    daemon.tick()
    control.commands = [{"stop": 5, "reason": "canceled", "grace_s": 30}]
    clock.now += 2000
    daemon.tick()
    assert runner.terminated == [(5, 30.0)] and runner.killed == []
    clock.now += 30
    daemon.tick()
    assert runner.killed == [5]
    clock.now += 5
    daemon.tick()
    assert runner.killed == [5], "not before poll_max_s"
    clock.now += 5
    daemon.tick()
    assert runner.killed == [5, 5]
    runner.changes = [Change(5, "exited", exit_code=137)]
    clock.now += 10
    daemon.tick()
    clock.now += 10
    daemon.tick()
    assert runner.killed == [5, 5] and calls(control, "stopped")


def takes(claimed: dict, whole_gpus: bool) -> int:
    """The milli-GPUs a task takes: each node's fraction rounded up to whole GPUs where whole."""
    per_node = milli(claimed["gpus"])
    if whole_gpus:
        per_node = -(-per_node // 1000) * 1000
    return per_node * claimed["nodes"]


amounts = st.sampled_from(["0", "0.1", "0.25", "0.5", "0.7", "1", "1.5", "2", "3"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(amounts, st.integers(1, 3)), max_size=12),
    st.booleans(),
    st.integers(1, 4),
)
def test_claiming_by_total_never_books_a_gpu_below_empty_or_above_whole_and_ending_restores_it(
    claimed, whole_gpus, gpus
):
    """Whatever the control plane hands (even more than the worker has), every GPU's free share
    stays within [0, 1], the free total falls by what each task takes (GPUs x nodes, each node's
    fraction a whole GPU where the scheduler allocates whole GPUs) until nothing is left, and once
    every task has ended the worker is whole again."""
    runner = WholeGpuRunner() if whole_gpus else TotalRunner()
    tasks = [{**task(i, amount), "nodes": nodes} for i, (amount, nodes) in enumerate(claimed, start=1)]
    daemon, control, clock = make(runner, gpus=gpus, claims=[[t] for t in tasks], poll_min_s=0)
    daemon.enrol()
    for _ in tasks:
        daemon.tick()
        clock.now += 100
        assert all(0 <= left <= 1000 for left in daemon.free)
        taken = sum(takes(t, whole_gpus) for t in tasks if t["id"] in runner.started)
        assert sum(daemon.free) == max(0, gpus * 1000 - taken)
    # A full worker claims nothing more, so the rest of the script is never handed out.
    assert runner.started == [t["id"] for t in tasks][: len(runner.started)]
    runner.changes = [Change(task_id, "exited", exit_code=0) for task_id in runner.started]
    control.claims = []
    daemon.tick()
    assert daemon.free == [1000] * gpus
