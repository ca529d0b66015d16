"""The real processes of the crash tests, each started, killed with SIGKILL and restarted as an
operator's machine would see it: the web server, the engine (the ``run_engine`` loop, or a Celery
worker with beat), ``klique-worker`` daemons, a process submitting over HTTP, and a Redis server
and a PostgreSQL cluster that the test owns (so restarting them touches no other test).

Every wait here is on progress, never on a guessed total time: on a loaded machine everything is
slower but keeps moving. A wait fails only after ``STALL_S`` (``CRASH_STALL_S``, default 180 s)
without any sign of progress, or after ``CAP_S`` (``CRASH_CAP_S``, default 1 hour) in all, and
says what was stuck."""

import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PASS_S = 0.25
STALL_S = float(os.environ.get("CRASH_STALL_S", "180"))
CAP_S = float(os.environ.get("CRASH_CAP_S", "3600"))


def wait_on_progress(done, progress=lambda: None, *, what: str, stuck=lambda: "", every: float = 0.2):
    """Wait until ``done()``, as long as ``progress()`` keeps changing: fail after ``STALL_S``
    without a change, or after ``CAP_S`` in all, with ``stuck()``, what was stuck."""
    start = moved = time.monotonic()
    seen = progress()
    while True:
        value = done()
        if value:
            return value
        now, current = time.monotonic(), progress()
        if current != seen:
            seen, moved = current, now
        if now - moved > STALL_S or now - start > CAP_S:
            why = f"no progress for {now - moved:.0f} s" if now - moved > STALL_S else f"over {CAP_S:.0f} s"
            raise AssertionError(f"timed out waiting for {what}: {why}, progress {seen!r}; {stuck()}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Process:
    """A child in a session of its own (SIGKILL reaches its children too: Celery's pool, beat, the
    tasks a daemon runs), its output appended to ``<folder>/<name>.log``; a server's ``url``."""

    url = ""

    def __init__(self, name: str, args: list[str], env: dict, folder: Path):
        self.name, self.args, self.env, self.log = name, args, env, folder / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.args,
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def stop(self, timeout: float = 20) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


class Redis:
    """A redis-server of the test's own on a free port, without persistence: a restart loses the
    queue, as a crashed broker without a disk would."""

    def __init__(self, folder: Path):
        self.port, self.folder = free_port(), folder
        args = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.process = Process("redis", args, dict(os.environ), folder)
        self.wait_up()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def wait_up(self) -> None:
        import redis

        def up():
            try:
                return redis.Redis(port=self.port, socket_connect_timeout=1).ping()
            except redis.RedisError:
                return False

        wait_on_progress(up, what="redis-server to answer", stuck=self.process.output, every=0.05)

    def restart(self) -> None:
        self.process.kill()
        self.process.start()
        self.wait_up()

    def stop(self) -> None:
        self.process.kill()


class Postgres:
    """A PostgreSQL cluster of the test's own: ``initdb`` into a temporary folder, run as the
    postgres user (the server refuses root) on a free port, without fsync (a test cluster)."""

    def __init__(self):
        self.bin = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))[-1]
        self.dir = Path(tempfile.mkdtemp(prefix="klique-crash-pg-"))
        self.dir.chmod(0o755)
        shutil.chown(self.dir, "postgres", "postgres")
        self.port = free_port()
        self.as_postgres(
            f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-A", "trust", "-U", "postgres", "--no-sync"
        )
        self.start()

    def as_postgres(self, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True, timeout=STALL_S + 60
        )

    def url(self, db: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        )
        self.as_postgres(
            f"{self.bin}/pg_ctl",
            "-D",
            f"{self.dir}/data",
            "-l",
            f"{self.dir}/log",
            "-o",
            options,
            "-w",
            "-t",
            str(int(STALL_S)),
            "start",
        )

    def crash_restart(self) -> None:
        """Stop at once, as a crash would (``immediate``: recovery from the WAL on the next start)."""
        self.as_postgres(
            f"{self.bin}/pg_ctl",
            "-D",
            f"{self.dir}/data",
            "-m",
            "immediate",
            "-w",
            "-t",
            str(int(STALL_S)),
            "stop",
        )
        self.start()

    def copy_database(self, source_url: str, name: str) -> str:
        """A copy of the (migrated) database at ``source_url`` in this cluster; its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        dump = subprocess.run(
            ["pg_dump", "--no-owner", source_url], check=True, capture_output=True, timeout=120
        )
        subprocess.run(
            ["psql", "-q", "-v", "ON_ERROR_STOP=1", self.url(name)],
            input=dump.stdout,
            check=True,
            capture_output=True,
            timeout=120,
        )
        return self.url(name)

    def remove(self) -> None:
        try:
            self.as_postgres(f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


NOT_ENDED = "WHERE state NOT IN ('succeeded', 'failed', 'canceled')"
UNENDED = f"SELECT count(*) FROM tasks_task {NOT_ENDED}"
EVENTS = "SELECT count(*) FROM tasks_taskevent WHERE kind <> 'verdict'"


class Stack:
    """The control plane and its clients on ``database_url``: the estate (``tests.crash.db
    setup``), gunicorn, two ``klique-worker`` daemons of 2 GPUs on the pool of 4, the submitter,
    and a checker process (``tests.crash.db serve``); the engine is started by the test."""

    def __init__(self, folder: Path, database_url: str, redis_url: str = "", seed: int = 0, webs: int = 1):
        self.folder, self.database_url = folder, database_url
        env = {k: v for k, v in os.environ.items() if not k.startswith("KLIQUE_") and k != "REDIS_URL"}
        env.update(
            DATABASE_URL=database_url,
            DJANGO_SETTINGS_MODULE="klique.settings.test",
            DEBUG="0",
            ENGINE_PASS_INTERVAL_S=str(PASS_S),
            LOW_WATERMARK_S="5",
            WORKER_HEARTBEAT_S="0.5",
            WORKER_HEARTBEAT_TIMEOUT_S="5",
            WORKER_CLAIM_TIMEOUT_S="30",
            WORKER_STOP_GRACE_S="2",
        )
        if redis_url:
            env["REDIS_URL"] = redis_url
        self.env = env
        setup = subprocess.run(
            [sys.executable, "-m", "tests.crash.db", "setup"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert setup.returncode == 0, setup.stderr[-3000:]
        estate = json.loads(setup.stdout.splitlines()[-1])
        self.processes: list[Process] = []
        self.webs = [self.start_web(f"server{i or ''}", workers=2 if webs == 1 else 1) for i in range(webs)]
        self.server = self.webs[0]
        self.url = self.webs[0].url if webs == 1 else self.start_nginx()
        wait_on_progress(self.server_answers, what="the web server", stuck=self.server.output, every=0.05)
        self.workers = [
            self.start(
                f"w{i}",
                [str(BIN / "klique-worker"), "--server", self.url, "--gpus", "2", "--hostname", f"w{i}"]
                + ["--state-dir", str(folder / f"w{i}"), "--checkpoint-root", str(folder / "checkpoints")]
                + ["--poll-min", "0.2", "--poll-max", "1", "--retry-max", "1", "--tick", "0.1"],
                KLIQUE_ENROLMENT_TOKEN=estate["enrolment_token"],
            )
            for i in (1, 2)
        ]
        self.accepted, self.stop_file = folder / "accepted", folder / "stop"
        self.accepted.touch()
        submitter = ["-m", "tests.crash.submitter", self.url, json.dumps(estate["groups"])]
        submitter += [str(self.accepted), str(self.stop_file), str(seed)]
        self.submitter = self.start("submitter", [sys.executable, *submitter])
        self.checker = subprocess.Popen(
            [sys.executable, "-m", "tests.crash.db", "serve"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.engine: Process | None = None
        self.checks = 0
        self.host = socket.gethostname()

    def start(self, name: str, args: list[str], **env: str) -> Process:
        process = Process(name, args, self.env | env, self.folder)
        self.processes.append(process)
        return process

    def start_web(self, name: str, workers: int) -> Process:
        """gunicorn on a free port (``.url``)."""
        port = free_port()
        web = [str(BIN / "gunicorn"), "klique.wsgi:application", "--bind", f"127.0.0.1:{port}"]
        process = self.start(name, [*web, "--workers", str(workers), "--threads", "4", "--timeout", "60"])
        process.url = f"http://127.0.0.1:{port}"
        return process

    def start_nginx(self) -> str:
        """nginx in front of the web processes, as a scaled-out install runs it: a request that
        cannot reach one (refused before it was sent) goes to the next; a POST already sent is not sent
        again (the client sees 502 and retries, as the submitter does). Its URL."""
        port, folder = free_port(), self.folder / "nginx"
        folder.mkdir()
        upstreams = "".join(f"    server {w.url.removeprefix('http://')} max_fails=0;\n" for w in self.webs)
        temp = " ".join(f"{kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy"))
        user = "user root;\n" if os.geteuid() == 0 else ""  # workers read the temp folder (mode 700)
        (folder / "nginx.conf").write_text(
            f"{user}daemon off;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\nevents {{}}\n"
            f"http {{\n  access_log off;\n  {temp}\n  upstream web {{\n{upstreams}    keepalive 16;\n  }}\n"
            f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://web;\n"
            '      proxy_http_version 1.1;\n      proxy_set_header Connection "";\n'
            "      proxy_set_header Host $http_host;\n"
            "      proxy_next_upstream error timeout;\n    }\n  }\n}\n"
        )
        self.nginx = self.start("nginx", ["nginx", "-p", str(folder), "-c", str(folder / "nginx.conf")])
        return f"http://127.0.0.1:{port}"

    def start_engine(self, celery: bool, name: str = "") -> Process:
        """The engine (``name``, else ``celery`` or ``engine``), also kept as ``self.engine``."""
        if celery:
            args = [str(BIN / "celery"), "-A", "klique", "worker", "-B", "-Q", "engine,meter,sweep,celery"]
            args += ["--concurrency", "2", "--loglevel", "INFO", "--schedule", str(self.folder / "beat")]
        else:
            args = [sys.executable, "manage.py", "run_engine", "--interval", str(PASS_S)]
        self.engine = self.start(name or ("celery" if celery else "engine"), args)
        return self.engine

    def server_answers(self) -> bool:
        return self.web_answers(self)

    @staticmethod
    def web_answers(web) -> bool:
        """The login page answers at ``web.url`` (the stack's, through nginx, or one process's)."""
        try:
            return httpx.get(f"{web.url}/admin/login/", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, sql: str, *args):
        """One value from the database; None while it cannot be reached (a restart)."""
        try:
            with psycopg.connect(self.database_url, connect_timeout=2) as conn:
                return conn.execute(sql, args).fetchone()[0]
        except psycopg.OperationalError:
            return None

    def rows(self, sql: str, *args) -> list[tuple]:
        with psycopg.connect(self.database_url, connect_timeout=2) as conn:
            return conn.execute(sql, args).fetchall()

    def passes_since(self, since: datetime, ran: bool = False) -> int:
        """Passes recorded (run or skipped) that began after ``since``: the engine's real sign of
        life; ``ran``: only those that ran."""
        which = "NOT skipped AND " if ran else ""
        return self.query(f"SELECT count(*) FROM engine_passrecord WHERE {which}started_at > %s", since) or 0

    def passes_begun(self, since: datetime, wanted: int) -> bool:
        return self.alive() and self.passes_since(since) >= wanted

    def placements_since(self, since: datetime) -> int:
        sql = "SELECT count(*) FROM tasks_taskevent WHERE kind = 'placed' AND at > %s"
        return self.query(sql, since) or 0

    def check(self, final: bool = False) -> dict:
        """Every rule, in one snapshot of the database (``tests.crash.db``); the figures."""
        self.checker.stdin.write(f"{'final' if final else 'live'} {self.accepted}\n")
        self.checker.stdin.flush()
        line = self.checker.stdout.readline()
        assert line, "the checker process ended"
        answer = json.loads(line)
        assert answer.pop("ok"), answer["error"]
        self.checks += 1
        return answer

    def kill_engine_at_random_points(self, kills: int, rng: random.Random) -> None:
        """SIGKILL the engine (its whole process group) ``kills`` times, each after the restarted
        one has begun 1-3 passes and then at a random point of its loop (in a pass, the meter,
        the sweep or its sleep); check every rule after each kill; restart it."""
        for _ in range(kills):
            since, wanted = datetime.now(UTC), rng.randint(1, 3)
            begun = partial(self.passes_begun, since, wanted)
            wait_on_progress(
                begun,
                partial(self.passes_since, since),
                what=f"{wanted} passes of the engine",
                stuck=self.engine.output,
                every=0.05,
            )
            time.sleep(rng.uniform(0, PASS_S))
            self.alive()
            self.engine.kill()
            self.check()
            self.engine.start()

    def resumes(self, since: datetime) -> None:
        """Passes run and place work again after ``since``."""
        wait_on_progress(
            lambda: self.alive() and self.passes_since(since) and self.placements_since(since),
            lambda: (self.passes_since(since), self.placements_since(since)),
            what="a pass that places work after the restart",
            stuck=self.engine.output,
            every=0.05,
        )

    def alive(self) -> bool:
        """True while every process of the stack runs; fails with the output of one that ended."""
        for process in self.processes:
            assert process.alive(), f"{process.name} ended: {process.output()}"
        return True

    def drain(self) -> dict:
        """Stop submitting, let every task end, and check every rule on the whole history. The
        wait lasts as long as tasks keep moving (placed, claimed, started, ended: any event)."""
        self.stop_file.touch()
        wait_on_progress(lambda: self.submitter.process.poll() is not None, what="the submitter to stop")
        wait_on_progress(
            lambda: self.query(UNENDED) == 0,
            lambda: (self.query(UNENDED), self.query(EVENTS)),
            what="every task to end",
            stuck=self.unended,
            every=0.5,
        )
        return self.check(final=True)

    def unended(self) -> str:
        """What a drain that stopped moving was stuck on: the tasks by state, the oldest one's
        history, and any process of the stack that ended."""
        try:
            with psycopg.connect(self.database_url, connect_timeout=2) as conn:
                states = conn.execute(f"SELECT state, count(*) FROM tasks_task {NOT_ENDED} GROUP BY state")
                oldest = conn.execute(
                    "SELECT kind, reason, at FROM tasks_taskevent WHERE kind <> 'verdict' AND task_id ="
                    f" (SELECT min(id) FROM tasks_task {NOT_ENDED}) ORDER BY at, id"
                )
                states, oldest = dict(states.fetchall()), oldest.fetchall()
        except psycopg.OperationalError as error:
            return f"the database cannot be reached: {error}"
        ended = [p.name for p in self.processes if p is not self.submitter and not p.alive()]
        history = ", ".join(
            f"{kind}{'/' + reason if reason else ''} {at:%H:%M:%S}" for kind, reason, at in oldest
        )
        return f"unended by state {states}; the oldest: {history}; processes ended: {ended or 'none'}"

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.checker.stdin.close()
        self.checker.wait(timeout=30)
