"""A few days of demo work, run through the real services on a moving clock (time-machine): the
demo users submit, the engine passes and the budget meter run every half hour, and one
worker per pool claims, starts, finishes and stops the work the way a daemon reports it. The
dashboards then have history to show: usage by business unit and pool, borrowed GPUs, a daily
budget used up, preemptions, budget alerts and work waiting."""

from datetime import timedelta
from decimal import Decimal
from itertools import cycle

import time_machine
from django.utils import timezone

from apps.accounts.models import User
from apps.engine import services as engine
from apps.policies.models import ComputeResource
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool, Worker
from apps.portal import demo
from apps.tasks import services as tasks
from apps.tasks.models import Channel, Task
from apps.workers import services as protocol

# (user, compute resource, GPUs or None for the profile's size, hours it runs)
WORK = [
    ("dev-pretraining", "pretraining/h100-8", None, 10),
    ("dev-vision", "perception/gpu-flex", "4", 6),
    ("dev-agents", "agents/gpu-flex", "1", 5),
    ("dev-generation", "generation/a100-1", None, 4),
    ("dev-alignment", "alignment/a100-1", None, 3),
    ("dev-ranking", "ranking/l40s-1", None, 2),
    ("dev-alignment", "alignment/h100-8", None, 8),
]
STEP = timedelta(minutes=30)
SUBMIT_EVERY = 4  # steps: two hours


def _workers(at) -> list[Worker]:
    workers = []
    for pool in Pool.objects.filter(enabled=True):
        token = EnrolmentToken(pool=pool, name="demo history")
        pools.issue_enrolment_token(token, now=at)
        worker, _ = protocol.enrol(
            token, hostname=f"demo-{pool.name}", gpus=pool.capacity, mode="process", now=at
        )
        workers.append(worker)
    return workers


def _serve(workers: list[Worker], hours_of: dict[int, int], at) -> None:
    """What each pool's daemon reports: stopped work, finished work, newly claimed and started work."""
    for worker in workers:
        for task in Task.objects.filter(worker=worker, state=Task.State.STOPPING):
            protocol.report_stopped(worker, task.pk, now=at)
        for task in Task.objects.filter(worker=worker, state=Task.State.RUNNING):
            if at - task.started_at >= timedelta(hours=hours_of.get(task.pk, 1)):
                protocol.report_exited(worker, task.pk, exit_code=0, now=at)
        claimed = protocol.claim(worker, free=None, free_gpus=Decimal(worker.gpus), max_tasks=100, now=at)
        for each in claimed:
            protocol.report_started(worker, each.task.pk, now=at)


def run(days: int = 2, per_wave: int = 4) -> None:
    """``days`` of demo work up to now: ``per_wave`` tasks every two hours."""
    users = {u.username: u for u in User.objects.filter(username__startswith="dev-")}
    resources = {r.name: r for r in ComputeResource.objects.select_related("policy", "profile")}
    work = cycle(WORK)
    project_of = demo.project_picker()
    hours_of: dict[int, int] = {}
    now = timezone.now()
    at = now - timedelta(days=days)
    with time_machine.travel(at, tick=False) as clock:
        workers = _workers(at)
        step = 0
        while at <= now:
            clock.move_to(at)
            if step % SUBMIT_EVERY == 0:
                for _ in range(per_wave):
                    username, resource, gpus, hours = next(work)
                    task = tasks.submit(
                        user=users[username],
                        compute_resource=resources[resource],
                        project=project_of(resource),
                        gpus=gpus,
                        command=f"sleep {hours * 3600}",
                        name=f"{resource.split('/')[0]} run",
                        channel=Channel.SDK,
                    )
                    hours_of[task.pk] = hours
            engine.run_pass(now=at)
            engine.run_meter(now=at)
            _serve(workers, hours_of, at)
            at += STEP
            step += 1
