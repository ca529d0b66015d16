"""The real stack for end-to-end tests: the engine loop (``manage.py run_engine``) and
``klique-worker`` daemons as processes, and a TCP proxy in front of the live server whose
``down`` cuts every connection, as an outage of the control plane would."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
WORKER = str(Path(sys.executable).with_name("klique-worker"))


def database_url() -> str:
    """The URL of the database this test runs on (the test database), for the processes."""
    db = settings.DATABASES["default"]
    user, host, port = db["USER"] or "postgres", db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    return f"postgres://{user}@{host}:{port}/{db['NAME']}"


def stack_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLIQUE_")}
    names = [
        "WORKER_HEARTBEAT_S",
        "WORKER_HEARTBEAT_TIMEOUT_S",
        "WORKER_CLAIM_TIMEOUT_S",
        "WORKER_STOP_GRACE_S",
    ]
    env.update({name: str(getattr(settings, name)) for name in names})
    env.update(DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE="klique.settings.test", **extra)
    return env


class Process:
    """A child process whose output goes to a file, stopped with SIGTERM (or killed) at the end."""

    def __init__(self, args: list[str], env: dict, log: Path):
        self.log = log
        self.process = subprocess.Popen(
            args, env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT
        )

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def engine(log: Path, interval: float = 0.5) -> Process:
    args = [sys.executable, "manage.py", "run_engine", "--interval", str(interval)]
    return Process(args, stack_env(), log)


def worker(server: str, token: str, hostname: str, folder: Path, gpus: int = 1) -> Process:
    args = [WORKER, "--server", server, "--gpus", str(gpus), "--hostname", hostname]
    args += ["--state-dir", str(folder / hostname), "--checkpoint-root", str(folder / "checkpoints")]
    args += ["--poll-min", "0.2", "--poll-max", "1", "--retry-max", "1", "--tick", "0.1"]
    return Process(args, stack_env(KLIQUE_ENROLMENT_TOKEN=token), folder / f"{hostname}.log")


class Proxy:
    """Forwards 127.0.0.1:<port> to the live server; while ``down`` it drops every connection."""

    def __init__(self, target: str):
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.down = False
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.set_down(True)
        self.listener.close()

    def set_down(self, down: bool) -> None:
        self.down = down
        if down:
            with self.lock:
                for sock in self.open:
                    _hang_up(sock)
                self.open.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open.update({client, upstream})
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _hang_up(source)
            _hang_up(sink)


def _hang_up(sock: socket.socket) -> None:
    """Shut down before closing: a plain close leaves a recv blocked in another thread waiting."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def wait_for(check, timeout: float = 60, every: float = 0.2, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def other_sessions_closed() -> None:
    """Wait until no other process or server thread holds a session on the test database."""
    from django.db import connection

    def closed() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0] == 0

    wait_for(closed, timeout=15, what="the other database sessions to close")
