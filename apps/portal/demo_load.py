"""A stream of demo work, so that a newcomer to ``make run`` sees the engine at work in minutes:
a team borrowing idle GPUs, another reclaiming its reservation, a daily budget running out.

``demo_load`` also starts one real ``klique-worker`` per demo pool (process mode; the tasks are
``sleep`` commands, those that checkpoint reporting a checkpoint each minute), so placed work is
claimed, runs, is preempted by SIGTERM (its lost work counted) and completes. An
autoscaled cloud pool gets none: its autoscaler launches its nodes, each a worker of its own.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from apps.accounts.models import User
from apps.policies.models import ComputeResource
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool
from apps.portal import demo
from apps.tasks import services as tasks
from apps.tasks.models import Channel, Task


@dataclass(frozen=True)
class Wave:
    """At ``at_s`` seconds, ``username`` submits ``count`` tasks to ``resource``."""

    at_s: int
    username: str
    resource: str
    count: int
    gpus: str | None
    minutes: tuple[float, float]
    name: str


# The story: Perception borrows idle A100s; the Agents team's small daily budget runs out;
# Generation queues work inside its reservation and takes borrowed GPUs back; training keeps the
# HPC pool busy throughout, so Alignment's H100 runs overflow to the cloud pool, which grows a node
# per run and shrinks again once they end.
STORY = [
    Wave(0, "dev-vision", "perception/gpu-flex", 12, "4", (5, 8), "detector sweep"),
    Wave(0, "dev-pretraining", "pretraining/h100-8", 14, None, (6, 10), "llm pretraining shard"),
    Wave(5, "dev-agents", "agents/gpu-flex", 16, "1", (8, 12), "agent eval"),
    Wave(20, "dev-alignment", "alignment/h100-8", 4, None, (3, 5), "reward model run"),
    Wave(90, "dev-generation", "generation/a100-1", 24, None, (2, 4), "diffusion finetune"),
]
BACKGROUND = [
    ("dev-ranking", "ranking/l40s-1", None, "ranker trial"),
    ("dev-alignment", "alignment/a100-1", None, "rlhf step"),
    ("dev-vision", "perception/a100-quarter", None, "notebook session"),
    ("dev-agents", "agents/cpu-only", None, "tool-use crawl"),
]
MAX_WAITING_PER_USER = 12
CHECKPOINT_EVERY_S = 60


def demo_command(seconds: int, checkpoint: bool) -> str:
    """``sleep`` for the run's length; work that checkpoints touches its daemon's checkpoint mark
    every minute (docs/workers.md), so a reclaim of it loses at most a minute of GPU time."""
    if not checkpoint or seconds < CHECKPOINT_EVERY_S:
        return f"sleep {seconds}"
    minutes, rest = divmod(seconds, CHECKPOINT_EVERY_S)
    return (
        f'for _ in $(seq {minutes}); do sleep {CHECKPOINT_EVERY_S}; touch "$KLIQUE_CHECKPOINT_MARK"; done; '
        f"sleep {rest}"
    )


class DemoLoad:
    def __init__(self, seed: int = 2026):
        self.rng = random.Random(seed)
        self.users = {u.username: u for u in User.objects.filter(username__startswith="dev-")}
        self.resources = {r.name: r for r in ComputeResource.objects.select_related("policy", "profile")}
        self.pending = list(STORY)
        self.project_of = demo.project_picker()

    def submit(self, username: str, resource: str, gpus, minutes: tuple[float, float], name: str) -> Task:
        seconds = round(self.rng.uniform(*minutes) * 60)
        checkpoint = self.rng.random() < 0.5
        return tasks.submit(
            user=self.users[username],
            compute_resource=self.resources[resource],
            project=self.project_of(resource),
            gpus=gpus,
            command=demo_command(seconds, checkpoint),
            name=name,
            channel=Channel.SDK,
            checkpoint=checkpoint,
        )

    def tick(self, elapsed_s: float) -> int:
        """Submit the story's waves that are due and a little background work; return how many."""
        submitted = 0
        while self.pending and self.pending[0].at_s <= elapsed_s:
            wave = self.pending.pop(0)
            for _ in range(wave.count):
                self.submit(wave.username, wave.resource, wave.gpus, wave.minutes, wave.name)
                submitted += 1
        username, resource, gpus, name = self.rng.choice(BACKGROUND)
        waiting = Task.objects.filter(user=self.users[username], state=Task.State.QUEUED).count()
        if waiting < MAX_WAITING_PER_USER:
            self.submit(username, resource, gpus, (1, 3), name)
            submitted += 1
        return submitted


def start_workers(server: str, state_root: Path) -> list[subprocess.Popen]:
    """One process-mode worker daemon per enabled demo pool, serving its declared capacity; none for
    a cloud pool that autoscales (its nodes are its workers)."""
    executable = shutil.which("klique-worker", path=str(Path(sys.executable).parent)) or "klique-worker"
    processes = []
    for pool in static_pools():
        token = pools.issue_enrolment_token(
            EnrolmentToken(pool=pool, name="make run demo"), now=timezone.now()
        )
        env = os.environ | {"KLIQUE_ENROLMENT_TOKEN": token}
        state_dir = state_root / pool.name
        state_dir.mkdir(parents=True, exist_ok=True)
        command = [
            executable,
            "--server",
            server,
            "--mode",
            "process",
            "--gpus",
            str(int(pool.capacity)),
            "--hostname",
            f"demo-{pool.name}",
            "--state-dir",
            str(state_dir),
        ]
        log = open(state_dir / "worker.log", "ab")  # noqa: SIM115 - kept open for the child's life
        processes.append(
            subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_ignore_ctrl_c
            )
        )
    return processes


def static_pools():
    """The enabled pools whose capacity a static worker serves: all but the autoscaled ones."""
    return Pool.objects.filter(enabled=True, cloud__isnull=True).order_by("name")


def _ignore_ctrl_c() -> None:
    """The daemons stay in the terminal's process group, so ``make run``'s clean-up reaches them
    with SIGTERM, but Ctrl-C alone does not cut them off before they stop their tasks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_workers(processes: list[subprocess.Popen], grace_s: float = 60) -> None:
    """SIGTERM each daemon (it stops its tasks, which are requeued), then SIGKILL stragglers.
    Further signals to this process are ignored meanwhile, so a second Ctrl-C cannot orphan them;
    the handlers are restored afterwards (an ignored SIGTERM would be inherited by every process
    started later from this one)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def default_state_root() -> Path:
    return Path(settings.BASE_DIR) / "var" / "demo-workers"
