"""A process that keeps the engine busy, for the crash test: each loop submits, cancels and
finishes tasks at random and runs a pass. It prints a line as it begins each step (``submit``,
``finish``, ``cancel``, ``pass``) so that the test kills it with SIGKILL at random points of its
real work, counted in steps begun, never after a guessed time.

Run as ``python -m tests.engine_live.churn SEED`` with DATABASE_URL pointing at the test database.
"""

import os
import random
import sys

import django


def main(seed: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "klique.settings.base")
    django.setup()
    from django.utils import timezone

    from apps.accounts.models import User
    from apps.engine import services as engine
    from apps.policies.models import ComputeResource
    from apps.tasks import services as tasks
    from apps.tasks.models import Task

    def begin(step: str) -> None:
        print(step, flush=True)

    rng = random.Random(seed)
    user = User.objects.get(username="churn")
    resources = list(ComputeResource.objects.order_by("pk"))
    while True:
        for _ in range(rng.randint(0, 6)):
            begin("submit")
            tasks.submit(user=user, compute_resource=rng.choice(resources), command="churn")
        placed = list(Task.objects.filter(state=Task.State.PLACED).order_by("?")[: rng.randint(0, 4)])
        for task in placed:
            begin("finish")
            tasks.finish(task, exit_code=rng.choice([0, 0, 1]), at=timezone.now())
        for task in Task.objects.filter(state=Task.State.QUEUED).order_by("?")[: rng.randint(0, 1)]:
            begin("cancel")
            tasks.cancel(task)
        begin("pass")
        engine.run_pass()


if __name__ == "__main__":
    main(int(sys.argv[1]))
