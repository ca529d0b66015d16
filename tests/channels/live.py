"""Helpers for tests that drive a live server on a real port: the ``klique`` executable of this
environment, its environment, and moving a task through its life as the engine and a worker would."""

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.utils import timezone

from apps.tasks import services
from apps.tasks.models import Task

KLIQUE = str(Path(sys.executable).with_name("klique"))


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLIQUE_")}
    return {**env, "KLIQUE_CONFIG": str(tmp_path / "klique" / "config.json"), **extra}


def klique(env: dict, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([KLIQUE, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60)


def logged_in(tmp_path: Path, url: str, token: str) -> dict[str, str]:
    """The environment of a CLI logged in at ``url`` with ``token``."""
    env = cli_env(tmp_path)
    result = klique(env, "login", "--url", url, "--token", "-", stdin=token + "\n")
    assert result.returncode == 0, result.stderr
    return env


class Follower:
    """A running ``klique`` process whose output lines are read with a timeout."""

    def __init__(self, env: dict, *args: str):
        self.process = subprocess.Popen(
            [KLIQUE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def expect(self, words: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if words in line:
                return line
        raise AssertionError(f"no line with {words!r} in {self.seen}")

    def exit_code(self, timeout: float = 20) -> int:
        return self.process.wait(timeout=timeout)


def loaded(task_id: int) -> Task:
    return Task.objects.select_related("compute_resource__policy", "compute_resource__profile").get(
        pk=task_id
    )


def place(task_id: int, pool) -> None:
    services.place_many([(loaded(task_id), pool)], timezone.now())


def preempt(task_id: int, reason: str) -> None:
    services.request_stop_many([loaded(task_id)], reason, timezone.now())


def finish(task_id: int, exit_code: int) -> None:
    services.finish(loaded(task_id), exit_code=exit_code, at=timezone.now())
