"""A daemon whose runner sees its pool's GPUs (Kubernetes nodes) serves no more than it sees
(docs/workers.md, "GPUs it really has"): it enrols with the smaller of its --gpus and what it sees,
heartbeats it, and claims only that many; asked again every OBSERVE_EVERY_S; a runner that cannot
see (None) leaves the declared --gpus."""

from klique.worker.booking import OBSERVE_EVERY_S
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task
from tests.worker.test_sync_loop import make, sent


class Cluster(RecordingRunner):
    mode = "kubernetes"
    claims_total = True
    multi_node = True

    def __init__(self, seen):
        super().__init__()
        self.seen = seen
        self.asked = 0

    def observed_gpus(self):
        self.asked += 1
        return self.seen


def test_a_daemon_serves_no_more_gpus_than_its_runner_sees():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], heartbeat_s=5)
    runner = Cluster(seen=4)
    d = make(control, runner=runner, clock=clock, gpus=16)
    d.enrol()
    assert sent(control, "enrol")[0]["gpus"] == "4"
    assert d.claim_body(clock())["free_gpus"] == "4"
    assert d.heartbeat_body()["gpus"] == "4"


def test_what_it_sees_is_asked_again_after_a_minute_and_never_raises_it_above_its_gpus():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[], heartbeat_s=5)
    runner = Cluster(seen=4)
    d = make(control, runner=runner, clock=clock, gpus=16)
    d.enrol()
    runner.seen = 32  # a new rack: more than the pool serves
    d.tick()
    assert runner.asked == 1  # within the minute: not asked again
    clock.now += OBSERVE_EVERY_S
    d.tick()
    assert runner.asked == 2 and d.heartbeat_body()["gpus"] == "16" and d.free_gpus() == "16"


def test_a_runner_that_cannot_see_leaves_the_declared_gpus():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[], heartbeat_s=5)
    d = make(control, runner=Cluster(seen=None), clock=clock, gpus=8)
    d.enrol()
    assert sent(control, "enrol")[0]["gpus"] == "8" and d.free_gpus() == "8"


def test_with_nothing_seen_free_it_does_not_claim():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[], heartbeat_s=5)
    d = make(control, runner=Cluster(seen=0), clock=clock, gpus=8)
    d.enrol()
    assert not d.has_room() and d.claim_body(clock()) is None
