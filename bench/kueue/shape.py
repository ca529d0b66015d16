"""The work of a replay: Kueue's cohorts and queues as Klique's pools and policies (the baseline and
the large shape), the tasks each policy submits, and the quota-bound ideal makespan."""

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Shape:
    """Kueue's cohorts as Klique sees them: per cohort one pool and ``queues`` policies."""

    name: str
    cohorts: int
    queues: int  # policies per cohort (Kueue's cluster queues)
    reservation: int  # Kueue's nominal quota
    limit: int  # nominal quota plus borrowing limit
    classes: tuple[tuple[int, int, float], ...]  # per policy: count, GPUs, run time (s)

    @property
    def pool_gpus(self) -> int:
        """A cohort's GPUs: the sum of its queues' nominal quotas."""
        return self.queues * self.reservation


BASELINE = Shape("baseline", 1, 6, 20, 120, ((350, 1, 0.2), (100, 5, 0.5), (50, 20, 1.0)))
LARGE = Shape("large", 20, 100, 20, 120, ((20, 1, 0.2), (7, 5, 0.5), (3, 20, 1.0)))
LARGE_SMOKE = replace(LARGE, cohorts=2, queues=4, classes=((4, 1, 0.2), (2, 5, 0.5), (1, 20, 1.0)))


def shape_for(name: str, cohorts: int | None, scale: float, smoke: bool) -> tuple[Shape, float]:
    """The shape to run and the share of each class's tasks that ``workload`` takes."""
    if name == "baseline":
        return replace(BASELINE, cohorts=cohorts or 1), scale
    if smoke:
        return LARGE_SMOKE, 1.0
    if round(LARGE.cohorts * scale) >= 1:
        return replace(LARGE, cohorts=min(LARGE.cohorts, round(LARGE.cohorts * scale))), 1.0
    return replace(LARGE, cohorts=1, queues=max(1, round(LARGE.cohorts * LARGE.queues * scale))), 1.0


def ideal_makespan_s(work, shape: Shape) -> float:
    """The quota-bound lower bound: the largest of each cohort's GPU-seconds over its pool's GPUs,
    each policy's over its limit (or the pool, if smaller), and the longest task."""
    per_cohort: dict[str, float] = {}
    bound = 0.0
    for name, tasks in work:
        seconds = sum(gpus * run for gpus, run in tasks)
        cohort = name.split("q", 1)[0]
        per_cohort[cohort] = per_cohort.get(cohort, 0.0) + seconds
        bound = max(bound, seconds / min(shape.limit, shape.pool_gpus), *(run for _, run in tasks))
    bound = max(bound, *(seconds / shape.pool_gpus for seconds in per_cohort.values()))
    return round(bound, 1)


def workload(shape: Shape, scale: float) -> list[tuple[str, list[tuple[int, float]]]]:
    """Per policy (its name, ``c<cohort>q<queue>``), the tasks in submission order: (GPUs, run time)."""
    out = []
    for c in range(shape.cohorts):
        for q in range(shape.queues):
            tasks = []
            for count, gpus, run in shape.classes:
                tasks += [(gpus, run)] * max(1, round(count * scale))
            out.append((f"c{c}q{q}", tasks))
    return out
