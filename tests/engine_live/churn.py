"""A process that keeps the engine busy, for the crash test: each loop submits, cancels and
finishes tasks at random and runs a pass. The test kills it with SIGKILL at random points.

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

    rng = random.Random(seed)
    user = User.objects.get(username="churn")
    resources = list(ComputeResource.objects.order_by("pk"))
    while True:
        for _ in range(rng.randint(0, 6)):
            tasks.submit(user=user, compute_resource=rng.choice(resources), command="churn")
        placed = list(Task.objects.filter(state=Task.State.PLACED).order_by("?")[: rng.randint(0, 4)])
        for task in placed:
            tasks.finish(task, exit_code=rng.choice([0, 0, 1]), at=timezone.now())
        for task in Task.objects.filter(state=Task.State.QUEUED).order_by("?")[: rng.randint(0, 1)]:
            tasks.cancel(task)
        engine.run_pass()


if __name__ == "__main__":
    main(int(sys.argv[1]))
