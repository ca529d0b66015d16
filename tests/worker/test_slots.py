"""GPU slots: whole tasks take whole free GPUs, fractions share the fullest GPU they fit on, and
nothing is ever given more than a GPU holds; booked by total, a task drains the slots until its
size is covered, and giving back restores exactly what it took."""

from hypothesis import given
from hypothesis import strategies as st

from klique.worker.slots import WHOLE, fit, give_back, largest, milli, take, take_total


def test_whole_gpus_are_the_lowest_free_ones():
    assert fit([1000, 500, 1000, 1000], 2000) == [0, 2]
    assert fit([1000, 500, 1000], 3000) is None


def test_a_fraction_takes_the_fullest_gpu_it_fits_on():
    assert fit([1000, 500, 300], 250) == [2]
    assert fit([1000, 200], 500) == [0]
    assert fit([100], 250) is None


def test_cpu_only_work_takes_no_gpu():
    assert fit([], 0) == [] and fit([0, 0], 0) == []


def test_milli_is_exact_and_refuses_more_than_three_decimals():
    assert milli("0.125") == 125 and milli("2") == 2000
    try:
        milli("0.0001")
    except ValueError:
        pass
    else:
        raise AssertionError("accepted four decimals")


def test_largest_is_the_most_that_could_fit():
    assert largest([1000, 1000, 400]) == 2000 and largest([400, 300]) == 400 and largest([]) == 0


sizes = st.one_of(st.integers(1, 999), st.integers(1, 4).map(lambda n: n * WHOLE))


@given(st.lists(sizes, max_size=30), st.integers(0, 8))
def test_slots_are_never_overcommitted(requests, gpus):
    free = [WHOLE] * gpus
    for size in requests:
        chosen = fit(free, size)
        if chosen is not None:
            take(free, chosen, size)
            assert len(set(chosen)) == len(chosen)
        assert all(0 <= left <= WHOLE for left in free)


def test_booking_by_total_drains_the_fullest_slots_first():
    free = [1000, 500, 400]
    assert take_total(free, 700) == {2: 400, 1: 300} and free == [1000, 200, 0]
    assert take_total(free, 5000) == {1: 200, 0: 1000} and free == [0, 0, 0]
    assert take_total(free, 100) == {}


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5000)), max_size=30), st.integers(0, 8))
def test_booking_by_total_never_overcommits_and_giving_back_restores_free(steps, gpus):
    free = [WHOLE] * gpus
    booked = []
    for release, size in steps:
        if release and booked:
            give_back(free, booked.pop(size % len(booked)))
        else:
            before = sum(free)
            taken = take_total(free, size)
            assert sum(taken.values()) == min(size, before) and sum(free) == before - min(size, before)
            booked.append(taken)
        assert all(0 <= left <= WHOLE for left in free)
    for taken in booked:
        give_back(free, taken)
    assert free == [WHOLE] * gpus
