"""The daemon's loop with ``sync`` and wake-ups (docs/workers.md, "The daemon's loop"): one round
trip per tick carries the queued reports, the heartbeat when due and a claim when there is room;
each report's answer is handled as a separate report's was; an unreachable control plane keeps
every report for the next sync; a control plane without ``sync`` (404) gets separate calls for
good. Between ticks the daemon sleeps until the tick interval or a wake-up: a process of its own
ending, or the waker thread hearing from ``wait`` that work was placed (without turning work that
fits nowhere here into a hot loop; a control plane without ``wait`` leaves it to its polling).

The wake-up tests run the loop for real with a 30 s tick and check that what the wake-up brings
happens well before the tick would: behaviour, with generous bounds, not timings."""

import contextlib
import threading
import time

import httpx

from klique.worker.client import ControlPlane, Rejected
from klique.worker.daemon import Daemon, Settings
from klique.worker.process import ProcessRunner
from klique.worker.runs import Change
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task

LONG_TICK_S = 30.0
SOON_S = 10.0  # well within LONG_TICK_S: only a wake-up explains it


class EndsWhenStopped(RecordingRunner):
    """Its work runs once started and ends as soon as it is told to stop, and says so as a process
    runner does."""

    def __init__(self):
        super().__init__()
        self.on_change = None

    def start(self, task: dict, devices: list[str]) -> None:
        super().start(task, devices)
        self.changes.append(Change(task["id"], "running"))

    def terminate(self, task_id: int, grace_s: float = 0) -> None:
        super().terminate(task_id, grace_s)
        self.changes.append(Change(task_id, "exited", 143))
        if self.on_change is not None:
            self.on_change()


def make(control, runner=None, clock=None, gpus=2, **options) -> Daemon:
    settings = {"poll_min_s": 1.0, "poll_max_s": 10.0, "retry_max_s": 30.0, **options}
    devices = [f"GPU-{i}" for i in range(gpus)]
    return Daemon(
        Settings(hostname="h", enrolment_token="kqe_x", devices=devices, **settings),
        control,
        runner or RecordingRunner(),
        clock=clock or time.monotonic,
    )


def syncs(control) -> list[dict]:
    return [body for kind, _, body in control.calls if kind == "sync"]


def sent(control, what: str) -> list[dict]:
    return [body for kind, _, body in control.calls if kind == what]


def eventually(check, timeout: float = SOON_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.01)


@contextlib.contextmanager
def running(daemon: Daemon):
    """``daemon.run()`` in a thread; shut down and joined at the end."""
    result = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    thread.start()
    try:
        yield result
    finally:
        daemon.shutdown()
        thread.join(timeout=20)
        assert not thread.is_alive()


# One round trip per tick.


def test_one_sync_per_tick_carries_the_reports_the_heartbeat_and_the_claim():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)], [task(8)]], heartbeat_s=5)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    (first,) = syncs(control)
    assert first["reports"] == [] and first["heartbeat"]["tasks"] == [] and first["claim"]["max_tasks"] == 100
    assert d.runner.started == [7]
    d.runner.changes = [Change(7, "running")]
    clock.now += 100  # the heartbeat and the next claim are due
    d.tick()
    second = syncs(control)[1]
    assert [(r["task"], r["what"]) for r in second["reports"]] == [(7, "started")]
    assert second["heartbeat"]["tasks"] == [7] and second["claim"]["slots"] == ["0", "1"]
    assert len(syncs(control)) == 2 and control.separate == []
    assert d.runner.started == [7, 8] and not d.reports


def test_a_tick_with_nothing_due_sends_nothing():
    clock = Clock()
    control = ScriptedControlPlane(clock, heartbeat_s=5)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    clock.now += 0.5
    d.tick()
    assert len(syncs(control)) == 1


def test_gpus_given_back_are_claimed_again_in_the_sync_that_reports_the_exit():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7, gpus="2")], [task(8, gpus="2")]], heartbeat_s=100)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    clock.now += 0.25  # the claim interval is not over
    d.runner.changes = [Change(7, "running"), Change(7, "exited", 0)]
    d.tick()
    last = syncs(control)[-1]
    assert [r["what"] for r in last["reports"]] == ["started", "exited"] and last["claim"] is not None
    assert d.runner.started == [7, 8]


def test_a_refused_report_is_sent_again_reduced_at_once_and_the_reports_after_it_keep_their_order():
    clock = Clock()
    refuse = lambda what, body: what == "exited" and "log_tail" in body  # noqa: E731
    control = ScriptedControlPlane(clock, claims=[[task(7), task(8)]], refuse=refuse, heartbeat_s=100)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    d.runner.changes = [Change(7, "running"), Change(7, "exited", 3), Change(8, "running")]
    d.tick()
    kinds = [
        [(r["task"], r["what"], sorted(r["body"])) for r in body["reports"]] for body in syncs(control)[1:]
    ]
    start, full_exit = ["at", "detail"], ["at", "exit_code", "log_tail"]
    assert kinds == [
        [(7, "started", start), (7, "exited", full_exit), (8, "started", start)],
        [(7, "exited", ["at", "exit_code"]), (8, "started", start)],
    ]
    assert not d.reports and 7 not in d.held and 8 in d.held


def test_a_report_refused_with_nothing_left_to_leave_out_is_given_up_and_its_task_forgotten():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], refuse=lambda what, body: what == "exited")
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    d.runner.changes = [Change(7, "running"), Change(7, "exited", 0)]
    d.tick()
    assert [sorted(body) for body in sent(control, "exited")] == [
        ["at", "exit_code", "log_tail"],
        ["at", "exit_code"],
        ["exit_code"],
    ]
    assert not d.reports and d.held == {}


def test_reports_are_kept_across_an_unreachable_control_plane_and_go_in_the_next_sync():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], heartbeat_s=100)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    control.down = True
    d.runner.changes = [Change(7, "running"), Change(7, "exited", 0)]
    d.tick()
    assert [r.what for r in d.reports] == ["started", "exited"] and d.failures == 1
    control.down = False
    clock.now = d.retry_at
    d.tick()
    last = syncs(control)[-1]
    assert [(r["task"], r["what"]) for r in last["reports"]] == [(7, "started"), (7, "exited")]
    assert last["reports"][1]["body"]["exit_code"] == 0
    assert not d.reports and d.held == {} and d.failures == 0


def test_a_claim_refused_as_lost_heartbeats_in_the_next_sync():
    clock = Clock()
    control = ScriptedControlPlane(clock, heartbeat_s=100)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()

    def lost(body):
        control._call("claim", body)
        raise Rejected("HTTP 409: marked lost", 409)

    control.claim = lost
    clock.now += 20  # a claim is due, the heartbeat is not
    d.tick()
    assert syncs(control)[-1]["heartbeat"] is None and d.next_heartbeat == 0
    del control.claim
    clock.now += 1
    d.tick()
    assert syncs(control)[-1]["heartbeat"] is not None


def test_a_heartbeat_stop_command_in_the_sync_answer_is_acted_on():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], heartbeat_s=5)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    control.commands = [{"stop": 7, "reason": "preempted", "grace_s": 12}]
    clock.now += 10
    d.tick()
    assert d.runner.terminated == [(7, 12)] and d.held[7].stop == "preempted"


def test_a_control_plane_without_sync_gets_separate_calls_from_then_on():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], syncs=False, heartbeat_s=5)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    assert control.separate == ["heartbeat", "claim"] and d.runner.started == [7]
    d.runner.changes = [Change(7, "running"), Change(7, "exited", 0)]
    clock.now += 10
    d.tick()
    assert control.separate[2:] == ["started", "exited", "heartbeat", "claim"]
    assert len(sent(control, "sync-404")) == 1, "asked once, never again"
    assert d.held == {} and not d.reports


def test_a_sync_refused_as_a_whole_is_sent_as_separate_calls_this_once():
    """A heartbeat the control plane cannot take (its sessions, say) must not stop the reports."""
    clock = Clock()

    class Strict(ScriptedControlPlane):
        def heartbeat(self, body):
            if self._in_sync:
                self._call("heartbeat", body)
                raise Rejected("HTTP 400: heartbeat.gpu_stats: bad", 400)
            return super().heartbeat(body)

    control = Strict(clock, claims=[[task(7)]], heartbeat_s=5)
    d = make(control, clock=clock)
    d.enrol()
    d.tick()
    assert control.separate == ["heartbeat", "claim"] and d.runner.started == [7] and d.syncs
    d.runner.changes = [Change(7, "running")]
    clock.now += 1
    d.tick()
    assert syncs(control)[-1]["heartbeat"] is None and control.separate == ["heartbeat", "claim"]


# Wake-ups.


def test_the_exit_of_a_process_wakes_the_loop_before_the_tick(tmp_path):
    control = ScriptedControlPlane(time.monotonic, claims=[[{**task(7), "command": "sleep 1"}]])
    runner = ProcessRunner(tmp_path / "state", tmp_path / "ckpt")
    d = make(control, runner, tick_s=LONG_TICK_S, wait_s=0)
    with running(d):
        eventually(lambda: sent(control, "exited"))
    (exited,) = sent(control, "exited")
    assert exited["exit_code"] == 0 and [b["what"] for b in sent(control, "sync")[1]["reports"]] == [
        "started"
    ]


def test_a_placement_the_waker_hears_of_wakes_the_loop_to_claim():
    control = ScriptedControlPlane(time.monotonic, claims=[[], [task(7)]])
    d = make(control, EndsWhenStopped(), tick_s=LONG_TICK_S)
    with running(d):
        eventually(lambda: len(sent(control, "claim")) == 1 and control.waits_asked)
        control.place()
        eventually(lambda: d.runner.started == [7])
        eventually(lambda: [r["what"] for s in syncs(control) for r in s["reports"]] == ["started"])
    assert len(sent(control, "claim")) == 2


def test_work_placed_that_does_not_fit_here_does_not_make_the_waker_ask_again_and_again():
    """Every wait answers at once that work is placed, and every claim gets nothing: the waker
    waits the claim interval (doubling from 1 s) between two waits, not a hot loop."""
    control = ScriptedControlPlane(time.monotonic)
    control.placed = [True] * 10_000
    d = make(control, EndsWhenStopped(), tick_s=LONG_TICK_S, poll_min_s=1, poll_max_s=10)
    with running(d):
        time.sleep(3)
    assert 1 <= len(control.waits_asked) <= 4, control.waits_asked
    assert len(sent(control, "claim")) <= 5


def test_a_control_plane_without_wait_stops_the_waker_and_the_loop_polls():
    control = ScriptedControlPlane(time.monotonic, claims=[[], [task(7)]], waits=False)
    d = make(control, EndsWhenStopped(), tick_s=0.05, poll_min_s=0.1, poll_max_s=0.2)
    with running(d):
        eventually(lambda: d.waker is not None and not d.waker.is_alive())
        eventually(lambda: d.runner.started == [7])
    assert len(control.waits_asked) == 1


# The client.


def test_a_long_wait_does_not_hold_up_a_sync_on_the_main_connection():
    """``wait`` has a connection of its own, with a read timeout beyond the wait."""
    release, seen = threading.Event(), []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.extensions["timeout"]["read"]))
        if request.url.path.endswith("/wait"):
            release.wait(SOON_S)
            return httpx.Response(200, json={"placed": True})
        return httpx.Response(200, json={"reports": [], "heartbeat": None, "tasks": [], "claim_error": None})

    client = ControlPlane("http://cp", transport=httpx.MockTransport(handle))
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(client.wait(20)), daemon=True)
    waiter.start()
    eventually(lambda: seen)
    assert client.sync({"reports": [], "heartbeat": None, "claim": None})["tasks"] == []
    assert not waited, "the sync was answered while the wait still waited"
    release.set()
    waiter.join(SOON_S)
    assert waited == [True]
    assert dict(seen) == {"/api/v1/workers/wait": 30.0, "/api/v1/workers/sync": 10}
    client.close()


def test_a_control_plane_without_sync_or_wait_answers_404_as_a_rejection():
    client = ControlPlane("http://cp", transport=httpx.MockTransport(lambda request: httpx.Response(404)))
    for call in (lambda: client.sync({}), lambda: client.wait(5)):
        try:
            call()
        except Rejected as error:
            assert error.status == 404
        else:
            raise AssertionError("not rejected")
