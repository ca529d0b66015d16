"""When the daemon talks to the control plane, on a clock the test moves and with an injected
random source: retries after failures back off exponentially up to ``--retry-max`` with full
jitter; claim polling doubles from ``--poll-min`` to ``--poll-max`` while there is nothing to
claim and drops back to the minimum after a claim; heartbeats come every interval, +-10 %."""

import random

import pytest

from klique.worker.daemon import Daemon, Settings
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task

STEP = 1 / 64  # how far the clock moves between two ticks (exact in binary: no rounding drift)


class Recorded(random.Random):
    """A seeded random source that remembers each ``uniform(a, b)`` it drew and what it gave."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.draws: list[tuple[float, float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        value = super().uniform(a, b)
        self.draws.append((a, b, value))
        return value


class Highest(random.Random):
    """The top of every range: the longest wait jitter allows."""

    def uniform(self, a: float, b: float) -> float:
        return b


def daemon(clock, control, rng, gpus=2, **settings) -> Daemon:
    options = {"poll_min_s": 1.0, "poll_max_s": 10.0, "retry_max_s": 30.0, **settings}
    return Daemon(
        Settings(hostname="h", enrolment_token="kqe_x", devices=[f"GPU-{i}" for i in range(gpus)], **options),
        control,
        RecordingRunner(),
        clock=clock,
        rng=rng,
    )


def run_for(d: Daemon, clock: Clock, seconds: float) -> None:
    end = clock.now + seconds
    while clock.now < end:
        d.tick()
        d.starter.settle()  # a process runner starts in threads: its outcome is taken next tick
        d.starter.settle()  # a process runner starts in threads: its outcome is taken next tick
        clock.now += STEP


def test_retries_back_off_exponentially_up_to_retry_max():
    clock = Clock()
    control = ScriptedControlPlane(clock, heartbeat_s=1000)
    d = daemon(clock, control, Highest(), retry_max_s=30)
    control.down = True
    run_for(d, clock, 200)
    attempts = control.times("heartbeat")
    waits = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    assert waits[:8] == [2, 4, 8, 16, 30, 30, 30, 30]
    assert [d.backoff_cap(n) for n in (1, 2, 3, 4, 5, 10, 50)] == [2, 4, 8, 16, 30, 30, 30]
    assert d.failures == len(attempts)


def test_the_retry_cap_stops_doubling_at_1024_s_whatever_retry_max_says():
    d = daemon(Clock(), ScriptedControlPlane(Clock()), Highest(), retry_max_s=10_000)
    assert [d.backoff_cap(n) for n in (9, 10, 11, 40)] == [512, 1024, 1024, 1024]


def test_retry_jitter_is_full_jitter_between_zero_and_the_cap():
    rng = Recorded(seed=20260302)
    d = daemon(Clock(), ScriptedControlPlane(Clock()), rng, retry_max_s=30)
    delays = {n: [] for n in range(1, 8)}
    for _ in range(400):
        d.failures = 0
        for n in range(1, 8):
            delays[n].append(d.backoff(ConnectionError("down")))
    for n, drawn in delays.items():
        cap = min(30, 2**n)
        assert all(0 <= delay <= cap for delay in drawn), n
        # Spread over the whole range, not bunched at the cap: a fleet does not come back in step.
        assert min(drawn) < 0.05 * cap and max(drawn) > 0.95 * cap, n
        assert 0.4 * cap < sum(drawn) / len(drawn) < 0.6 * cap, n
    assert {(a, b) for a, b, _ in rng.draws} == {(0, min(30, 2**n)) for n in range(1, 8)}


def test_a_success_resets_the_backoff():
    clock = Clock()
    control = ScriptedControlPlane(clock, heartbeat_s=1000)
    d = daemon(clock, control, Highest())
    control.down = True
    run_for(d, clock, 20)  # fails at 0, 2, 6, 14
    assert d.failures == 4
    control.down = False
    run_for(d, clock, 20)
    assert d.failures == 0
    control.down = True
    d.next_heartbeat = 0
    before = clock.now
    run_for(d, clock, 2.5)
    assert [at - before for at in control.times("heartbeat") if at >= before] == [0, 2]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_claim_polling_doubles_to_poll_max_while_there_is_nothing_and_resets_after_a_claim(seed):
    clock = Clock()
    rng = Recorded(seed)
    # Nothing five times, one task, nothing three times, one task, nothing.
    script = [[]] * 5 + [[task(7)]] + [[]] * 3 + [[task(8)]]
    control = ScriptedControlPlane(clock, claims=script, heartbeat_s=1000)
    d = daemon(clock, control, rng, gpus=4, poll_min_s=1, poll_max_s=10)
    run_for(d, clock, 100)
    claims = control.times("claim")
    gaps = [b - a for a, b in zip(claims, claims[1:], strict=False)]
    claim_draws = [(a, b, value) for a, b, value in rng.draws if (a, b) != (0.9, 1.1)]  # not heartbeats
    assert {(a, b) for a, b, _ in claim_draws} == {(0.8, 1.2)}
    factors = [value for _, _, value in claim_draws]
    expected = [2, 4, 8, 10, 10, 1, 2, 4, 8, 1, 2, 4, 8, 10]
    assert len(gaps) >= len(expected)
    for index, (gap, every) in enumerate(zip(gaps, expected, strict=False)):
        # Each wait is the current interval times the jitter drawn for it (the clock moves in
        # steps), and the jitter stays within 0.8 and 1.2.
        assert 0.8 <= factors[index] <= 1.2
        assert gap == pytest.approx(every * factors[index], abs=STEP * 1.5), (index, gaps)
    assert d.runner.started == [7, 8]


def test_a_worker_with_every_gpu_busy_does_not_ask_and_looks_again_after_poll_min():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7, gpus="2")]], heartbeat_s=1000)
    d = daemon(clock, control, Highest(), gpus=2, poll_min_s=1, poll_max_s=10)
    run_for(d, clock, 30)
    assert control.times("claim") == [1000.0]
    assert d.claim_every == 1 and d.free == [0, 0]


def test_heartbeats_come_every_interval_within_ten_percent():
    clock = Clock()
    rng = Recorded(seed=5)
    control = ScriptedControlPlane(clock, heartbeat_s=2.0)
    d = daemon(clock, control, rng)
    d.next_claim = float("inf")
    run_for(d, clock, 200)
    beats = control.times("heartbeat")
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert len(gaps) > 80
    assert all(1.8 - STEP <= gap <= 2.2 + 2 * STEP for gap in gaps)
    assert min(gaps) < 1.85 and max(gaps) > 2.15
    assert {(a, b) for a, b, _ in rng.draws} == {(0.9, 1.1)}


def test_a_claim_rejected_for_another_reason_than_lost_backs_off_to_poll_max_without_heartbeating():
    from klique.worker.client import Rejected

    clock = Clock()
    control = ScriptedControlPlane(clock)

    def refuse(body):
        control._call("claim", body)
        raise Rejected("HTTP 400: max_tasks: must be at least 1", 400)

    control.claim = refuse
    d = daemon(clock, control, random.Random(1))
    run_for(d, clock, 1)  # enrol, the first heartbeat, the first claim
    heartbeats = len(control.times("heartbeat"))
    run_for(d, clock, 12)
    claims = control.times("claim")
    assert [round(b - a) for a, b in zip(claims, claims[1:], strict=False)] == [10]
    assert len(control.times("heartbeat")) - heartbeats <= 3  # only the regular heartbeats


def test_in_a_large_estate_an_idle_daemon_claims_with_each_heartbeat_and_no_more_often():
    """Rule: told a heartbeat of 20 s and ``claim_max_s`` 20 (2,000 daemons), an idle daemon's
    claims back off to 20 s and ride along its heartbeats: about one sync every 20 s, not one
    every 10 s for claims and another for heartbeats."""
    clock = Clock()
    control = ScriptedControlPlane(clock, heartbeat_s=20.0)
    control.claim_max_s = 20.0
    d = daemon(clock, control, random.Random(3), gpus=4, poll_min_s=1, poll_max_s=10)
    run_for(d, clock, 60)  # the claim interval has doubled up to 20 s
    syncs_before = len(control.times("sync"))
    run_for(d, clock, 200)
    syncs = len(control.times("sync")) - syncs_before
    heartbeats = control.times("heartbeat")
    assert 9 <= syncs <= 13, syncs
    assert all(at in control.times("claim") for at in heartbeats if at > 60)
