"""The daemon's tick pacing: bursts after a quiet moment, the server's sync rate on average."""

from klique.worker.daemon import TickPacer


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_pacing_lets_a_burst_of_ticks_through_after_a_quiet_moment():
    clock = Clock()
    pacer = TickPacer(rate=8, burst=3, clock=clock)
    for _ in range(3):
        assert pacer.delay() == 0.0
        pacer.take()
    assert pacer.delay() == 0.125


def test_pacing_holds_wakeups_to_the_rate_on_average():
    clock = Clock()
    pacer = TickPacer(rate=8, burst=3, clock=clock)
    ticks, start = 0, clock.now
    while clock.now - start < 10:
        clock.now += pacer.delay()
        pacer.take()
        ticks += 1
        clock.now += 0.001
    assert ticks <= 8 * 10 + 3


def test_pacing_never_holds_a_tick_back_longer_than_one_token():
    clock = Clock()
    pacer = TickPacer(rate=8, burst=3, clock=clock)
    for _ in range(50):
        pacer.take()
    assert pacer.delay() == 0.125
    clock.now += 0.5
    assert pacer.delay() == 0.0
