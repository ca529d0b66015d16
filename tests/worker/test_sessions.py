"""Sessions on the worker: the daemon runs a real Jupyter server (or a command on a port) through
the process runner on a free port, finds out when it answers, reports its URL and what it measured
in the heartbeat, and a stop ends its whole process tree. The measurements (CPU of a process tree,
connections to a port, GPU utilisation, Jupyter's last activity) are checked against real
processes and sockets; GPU utilisation against a fake pynvml (no GPU on the test machine)."""

import json
import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import psutil
import pytest

from apps.tasks.models import Task
from klique.worker import cli, session_metrics, session_probes, sessions
from klique.worker.client import Rejected
from klique.worker.daemon import Daemon, Settings
from klique.worker.gpus import Nvml
from klique.worker.process import ProcessRunner
from klique.worker.session_metrics import CpuMeter
from klique.worker.sessions import SessionError, SessionSpec
from tests.worker.conftest import run_until
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, fake_pynvml

TOKEN = "kqs-test-token-0123456789"


def jupyter(task_id: int, **extra) -> dict:
    return {
        "kind": "jupyter",
        "token": TOKEN,
        "base_url": f"/sessions/{task_id}/",
        "ready_path": "/api/status",
        "sample_s": 1,
        **extra,
    }


def session_task(task_id: int, session: dict, **extra) -> dict:
    task = {"id": task_id, "command": "", "gpus": "0", "slots": [], "spec": {}, "preemption_count": 0}
    return {**task, "session": session, **extra}


@pytest.fixture
def serve(tmp_path):
    """serve(task) -> (daemon, control): a daemon with a real process runner whose first claim
    answers ``task`` (or a list of tasks); every process it started is killed at the end."""
    made = []

    def make(task: dict, runner=None, control_class=ScriptedControlPlane):
        control = control_class(Clock(), claims=[task if isinstance(task, list) else [task]], heartbeat_s=0.2)
        runner = runner or ProcessRunner(tmp_path / "state", tmp_path / "checkpoints")
        settings = Settings(
            hostname="node-1",
            enrolment_token="kqe_x",
            devices=[],
            poll_min_s=0.05,
            poll_max_s=0.2,
            tick_s=0.02,
            shutdown_grace_s=20,
            session_host="127.0.0.1",
        )
        daemon = Daemon(settings, control, runner)
        daemon.enrol()
        made.append(daemon)
        return daemon, control

    yield make
    for daemon in made:
        if isinstance(daemon.runner, ProcessRunner):
            stop_all(daemon.runner)


def stop_all(runner: ProcessRunner) -> None:
    """Kill what the runner still runs and wait until it has ended."""
    for task_id in list(runner.processes):
        runner.kill(task_id)
    run_until([], lambda: not runner.poll() and not runner.processes, timeout=20)


def reported(control, task_id: int) -> list[dict]:
    """The task's entries in the heartbeats' ``sessions``, in order."""
    return [
        body["sessions"][str(task_id)]
        for what, _, body in control.calls
        if what == "heartbeat" and str(task_id) in body.get("sessions", {})
    ]


def latest(control, task_id: int, check=lambda entry: True) -> dict | None:
    entries = [entry for entry in reported(control, task_id) if check(entry)]
    return entries[-1] if entries else None


def reports(control, what: str) -> list[dict]:
    return [body for kind, _, body in control.calls if kind == what]


# The session object of a claim.


def test_a_session_object_is_checked_before_anything_runs():
    spec = SessionSpec.parse({"kind": "jupyter", "token": "t", "base_url": "/sessions/4/"})
    assert (spec.ready_path, spec.sample_s, spec.command) == ("/api/status", 15.0, ())
    port = SessionSpec.parse({"kind": "port", "token": "t", "command": ["serve", "{port}"], "sample_s": 0})
    assert (port.base_url, port.ready_path, port.sample_s) == ("/", "/", 1.0)
    assert port.command == ("serve", "{port}")
    bad = [
        ("not an object", "session is not an object"),
        ({"kind": "desktop", "token": "t"}, "session kind 'desktop' is not one of jupyter, port"),
        ({"kind": "jupyter", "token": ""}, "session token is missing"),
        ({"kind": "jupyter", "token": "a b"}, "holds spaces"),
        ({"kind": "jupyter", "token": "t", "base_url": "/x/../y"}, "is not a path like /sessions/12/"),
        ({"kind": "jupyter", "token": "t", "base_url": "/x"}, "is not a path like /sessions/12/"),
        ({"kind": "port", "token": "t", "command": "serve"}, "needs command: a non-empty list"),
        ({"kind": "port", "token": "t", "command": []}, "needs command: a non-empty list"),
        ({"kind": "jupyter", "token": "t", "sample_s": "5"}, "is not a number of seconds"),
        ({"kind": "jupyter", "token": "t", "sample_s": float("nan")}, "is not a number of seconds"),
    ]
    for raw, message in bad:
        with pytest.raises(SessionError, match=message.replace("(", r"\(")):
            SessionSpec.parse(raw)


def test_the_jupyter_command_carries_no_token_and_the_port_command_gets_its_placeholders(tmp_path):
    spec = SessionSpec.parse(jupyter(3))
    argv = sessions.argv(spec, host="10.0.0.5", port=8123, root_dir=tmp_path, launcher=["jupyter-server"])
    assert argv[:2] == ["jupyter-server", "--no-browser"]
    for flag in (
        "--ServerApp.base_url=/sessions/3/",
        "--ServerApp.ip=10.0.0.5",
        "--ServerApp.port=8123",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={tmp_path}",
    ):
        assert flag in argv
    assert not any(TOKEN in arg for arg in argv)
    env = sessions.variables(spec, host="10.0.0.5", port=8123, root_dir=tmp_path)
    assert env["JUPYTER_TOKEN"] == env["KLIQUE_SESSION_TOKEN"] == TOKEN
    assert (env["KLIQUE_SESSION_PORT"], env["KLIQUE_SESSION_BASE_URL"]) == ("8123", "/sessions/3/")

    port = SessionSpec.parse(
        {"kind": "port", "token": "t", "base_url": "/s/3/", "command": ["ide", "--port={port}", "{base_url}"]}
    )
    assert sessions.argv(port, host="h", port=9000, root_dir=None) == ["ide", "--port=9000", "/s/3/"]
    task = sessions.session_task(
        session_task(3, {}, spec={"env": {"A": "1", "KLIQUE_SESSION_PORT": "1"}}),
        port,
        host="h",
        port=9000,
        root_dir=None,
    )
    assert task["command"] == "exec ide --port=9000 /s/3/"
    assert task["spec"]["env"]["A"] == "1" and task["spec"]["env"]["KLIQUE_SESSION_PORT"] == "9000"


def test_a_wildcard_bind_is_reported_with_the_hostname():
    assert sessions.url_host("0.0.0.0", "gpu-7") == "gpu-7"
    assert sessions.url_host("10.1.2.3", "gpu-7") == "10.1.2.3"
    assert sessions.url_host("::1", "gpu-7") == "[::1]"
    assert sessions.utc_iso("2026-12-03T18:58:57.132295Z") == "2026-12-03T18:58:57.132295+00:00"
    assert sessions.utc_iso("yesterday") is None and sessions.utc_iso(None) is None


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"])
def test_a_time_out_of_range_once_in_utc_reads_as_none(value):
    assert sessions.utc_iso(value) is None


def test_the_session_host_flag_and_its_variable(monkeypatch):
    base = ["--server", "http://x", "--enrolment-token", "kqe_x"]
    assert cli.parser().parse_args([*base, "--session-host", "0.0.0.0"]).session_host == "0.0.0.0"
    monkeypatch.setenv("KLIQUE_SESSION_HOST", "10.0.0.9")
    assert cli.parser().parse_args(base).session_host == "10.0.0.9"
    assert sessions.default_host("no-such-host.invalid") == "127.0.0.1"


# What is measured.


def test_gpu_utilisation_is_null_without_gpus_or_nvml_never_zero(monkeypatch):
    assert session_metrics.gpu_utilisation(None, ["GPU-uuid-0"]) is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2))
    nvml = Nvml.open()
    assert session_metrics.gpu_utilisation(nvml, []) is None
    assert session_metrics.gpu_utilisation(nvml, ["GPU-uuid-1"]) == 41.0
    assert session_metrics.gpu_utilisation(nvml, ["GPU-uuid-0", "GPU-uuid-1"]) == 40.5
    assert session_metrics.gpu_utilisation(nvml, ["0"]) == 40.0
    assert session_metrics.gpu_utilisation(nvml, ["GPU-elsewhere"]) is None
    broken = fake_pynvml(2)

    def fails(handle):
        raise broken.NVMLError("GPU is lost")

    broken.nvmlDeviceGetUtilizationRates = fails
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert session_metrics.gpu_utilisation(Nvml.open(), ["GPU-uuid-0"]) is None


def test_connections_count_established_clients_of_the_port_only():
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_server(("127.0.0.1", 0)) as other:
        port = server.getsockname()[1]
        assert session_metrics.established(port) == 0
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        elsewhere = socket.create_connection(("127.0.0.1", other.getsockname()[1]))
        accepted = [server.accept()[0] for _ in clients]
        assert session_metrics.established(port) == 2
        for sock in [*clients, *accepted, elsewhere]:
            sock.close()
        assert session_metrics.established(port) == 0
    rows = [
        "   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000 0 0 1",
        "   1: 0100007F:1F90 0100007F:D432 06 00000000:00000000 00:00000000 00000000 0 0 2",
        "   2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000 0 0 3",
        "   3: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 4",
    ]
    assert session_metrics.count_established(rows, 8080) == 1


def test_cpu_of_a_busy_process_tree_is_counted_and_an_idle_one_is_not(tmp_path):
    runner = ProcessRunner(tmp_path / "state", tmp_path / "checkpoints")
    busy = f"{sys.executable} -c 'while True: pass' & sleep 60"
    runner.start({"id": 1, "command": busy, "gpus": "0", "spec": {}}, [])
    runner.start({"id": 2, "command": "sleep 60 & sleep 60", "gpus": "0", "spec": {}}, [])
    try:
        meters = {task_id: CpuMeter() for task_id in (1, 2)}
        trees = {task_id: session_metrics.session_processes(runner.pid(task_id)) for task_id in (1, 2)}
        assert len(trees[1]) >= 2 and len(trees[2]) >= 2  # the shell (or sleep it became), the child
        assert all(meter.sample(trees[i]) is None for i, meter in meters.items())
        time.sleep(1.5)
        busy_pct = meters[1].sample(session_metrics.session_processes(runner.pid(1)))
        idle_pct = meters[2].sample(session_metrics.session_processes(runner.pid(2)))
        assert busy_pct > 10 and idle_pct < 2, (busy_pct, idle_pct)
    finally:
        stop_all(runner)


SHORT_JOBS = "while :; do sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'; done"


def test_cpu_of_a_tree_busy_with_short_lived_processes_is_counted(tmp_path):
    """A shell loop of short jobs: no job is alive at a sample, yet one core is busy all along."""
    runner = ProcessRunner(tmp_path / "state", tmp_path / "checkpoints")
    runner.start({"id": 1, "command": SHORT_JOBS, "gpus": "0", "spec": {}}, [])
    try:
        meter = CpuMeter()
        assert meter.sample(session_metrics.session_processes(runner.pid(1))) is None
        time.sleep(3)
        busy_pct = meter.sample(session_metrics.session_processes(runner.pid(1)))
        assert busy_pct > 10, busy_pct  # one core busy the whole time: about 100
    finally:
        stop_all(runner)


BURN_1S = f"""{sys.executable} -c '
import time
start = time.process_time()
while time.process_time() - start < 1: pass
'; sleep 60"""


def test_cpu_of_a_child_seen_alive_then_ended_is_counted_once(tmp_path):
    """A child counted while it ran is in its parent's children times once it has ended: the
    meter counts, over all its samples, the CPU the tree used, not that plus the child's again."""
    ticks = iter(range(100))
    runner = ProcessRunner(tmp_path / "state", tmp_path / "checkpoints")
    runner.start({"id": 1, "command": BURN_1S, "gpus": "0", "spec": {}}, [])
    try:
        root = psutil.Process(runner.pid(1))
        meter = CpuMeter(clock=lambda: float(next(ticks)))  # 1 s between samples: percent = CPU s * 100
        run_until([], lambda: root.children(), timeout=10)
        (child,) = root.children()
        assert meter.sample(session_metrics.session_processes(root.pid)) is None
        run_until([], lambda: sum(child.cpu_times()[:2]) > 0.4, timeout=30)
        while_alive = meter.sample(session_metrics.session_processes(root.pid))
        assert while_alive > 30  # the child's CPU so far, counted
        run_until(
            [], lambda: root.cpu_times().children_user + root.cpu_times().children_system >= 1, timeout=60
        )
        after = meter.sample(session_metrics.session_processes(root.pid))
        times = root.cpu_times()
        used = (times.user + times.system + times.children_user + times.children_system) * 100
        assert while_alive + after <= used + 5, (while_alive, after, used)
        assert while_alive + after >= 0.8 * 100  # the child's second of CPU, not lost either
    finally:
        stop_all(runner)


# Asking a session server: never held by a slow one.


def trickling_server(stop: threading.Event) -> int:
    """A server whose every answer is a 200 and then a body sent a byte every 0.2 s, without end."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)

    def serve():
        conns = []
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                conns.append(conn)
            except TimeoutError:
                pass
            for conn in conns:
                try:
                    conn.sendall(b"1\r\n \r\n")
                except OSError:
                    pass
        for conn in conns:
            conn.close()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def returns_within(call, seconds: float) -> list:
    """Run ``call`` in a thread; its result, or fail when it is still held after ``seconds`` (a
    hang, not a slow machine: the deadline is 2 s)."""
    done = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s: the daemon's loop would be stuck"
    return done


def test_a_server_that_never_finishes_its_answer_does_not_hold_the_probe_or_the_status_read():
    stop = threading.Event()
    port = trickling_server(stop)
    try:
        spec = SessionSpec.parse(jupyter(5))
        session = sessions.Session(5, spec, "127.0.0.1", port, "127.0.0.1")
        # The probe decides from the status line: a 200 is up, however the body comes.
        assert returns_within(lambda: session.probe(time.monotonic()), 20) == [True]
        status_url = f"http://127.0.0.1:{port}/sessions/5/api/status"
        assert returns_within(lambda: session_probes.jupyter_status(status_url, TOKEN), 20) == [None]
        assert returns_within(lambda: session.sample(time.monotonic(), None), 20) == [True]
        assert session.report()["last_activity"] is None
    finally:
        stop.set()


class BigStatus(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"last_activity": "2026-12-03T19:00:00Z", "pad": "x" * 100_000}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_status_larger_than_its_cap_is_not_read():
    server = ThreadingHTTPServer(("127.0.0.1", 0), BigStatus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/api/status"
        assert session_probes.jupyter_status(url, TOKEN) is None
        assert session_probes.jupyter_status(url, TOKEN, max_bytes=200_000)["last_activity"] is not None
    finally:
        server.shutdown()
        server.server_close()


# The daemon runs sessions.


def test_a_jupyter_session_is_reported_once_it_answers_and_only_with_its_token(serve, tmp_path):
    daemon, control = serve(session_task(5, jupyter(5)))
    run_until(daemon, lambda: latest(control, 5, lambda e: e["ready"]), timeout=60)
    session = daemon.sessions[5]
    url = f"http://127.0.0.1:{session.port}/sessions/5/"
    assert latest(control, 5, lambda e: e["ready"])["url"] == url
    assert all(entry["url"] is None for entry in reported(control, 5) if not entry["ready"])

    status = httpx.get(url + "api/status", headers={"Authorization": f"token {TOKEN}"})
    assert status.status_code == 200
    assert httpx.get(url + "api/status").status_code == 403
    assert httpx.get(url + "api/contents").status_code == 403

    # The server runs as a task: in its folder, with the session's variables, the token never on
    # its command line (ps shows that to every user of the host).
    pid = daemon.runner.pid(5)
    environ = dict(
        item.split("=", 1) for item in open(f"/proc/{pid}/environ").read().split("\0") if "=" in item
    )
    assert environ["KLIQUE_SESSION_PORT"] == str(session.port) and environ["KLIQUE_TASK_ID"] == "5"
    assert environ["CUDA_VISIBLE_DEVICES"] == ""
    assert TOKEN not in open(f"/proc/{pid}/cmdline").read()
    assert psutil.Process(pid).cwd() == str((tmp_path / "state" / "tasks" / "5").resolve())

    # Measured every sample_s: CPU of its tree, Jupyter's own last activity; no GPU, no traffic count.
    def measured(entry):
        return entry["ready"] and entry["cpu_percent"] is not None and entry["last_activity"] is not None

    run_until(daemon, lambda: latest(control, 5, measured), timeout=30)
    entry = latest(control, 5, measured)
    assert entry["gpu_util"] is None and entry["net_bytes"] is None
    assert entry["last_activity"] is not None and entry["kernels"] == 0
    before = entry["last_activity"]
    # Reading api/status (as the daemon does) is not activity; a request of the user's is.
    listed = httpx.get(url + "api/contents", headers={"Authorization": f"token {TOKEN}"})
    assert listed.status_code == 200
    run_until(daemon, lambda: latest(control, 5)["last_activity"] > before, timeout=30)
    assert json.dumps(latest(control, 5))  # plain JSON for the heartbeat


def kernels(tree: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for process in tree:
        try:
            if any("ipykernel" in arg for arg in process.cmdline()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_a_stopped_jupyter_session_exits_on_sigterm_within_its_grace_and_leaves_no_process(serve):
    daemon, control = serve(session_task(6, jupyter(6)))
    run_until(daemon, lambda: latest(control, 6, lambda e: e["ready"]), timeout=60)
    held = daemon.held[6]
    # A kernel, started as a user would (Jupyter's REST API, with the token): its own process.
    url = f"http://127.0.0.1:{daemon.sessions[6].port}/sessions/6/api/kernels"
    started = httpx.post(url, headers={"Authorization": f"token {TOKEN}"}, json={}, timeout=60)
    assert started.status_code == 201, started.text
    run_until(daemon, lambda: kernels(session_metrics.session_processes(daemon.runner.pid(6))), timeout=60)
    tree = session_metrics.session_processes(daemon.runner.pid(6))
    (kernel,) = kernels(tree)
    control.commands = [{"stop": 6, "reason": "canceled", "grace_s": 20}]
    run_until(daemon, lambda: reports(control, "stopped"), timeout=40)
    assert not held.killed  # it ended on SIGTERM, before the grace was over
    assert "received signal 15" in reports(control, "stopped")[0]["log_tail"]
    assert not any(process.is_running() and process.status() != "zombie" for process in tree)
    assert not kernel.is_running() or kernel.status() == "zombie"
    assert 6 not in daemon.sessions
    heartbeats = len(reports(control, "heartbeat"))
    run_until(daemon, lambda: len(reports(control, "heartbeat")) > heartbeats + 1)
    assert "sessions" not in reports(control, "heartbeat")[-1]


def test_a_port_session_runs_its_command_on_the_port_and_counts_its_clients(serve):
    # http.server serves its folder: the base URL is a folder in it.
    script = f"mkdir -p .{{base_url}} && exec {sys.executable} -m http.server {{port}} --bind {{host}}"
    session = {"kind": "port", "token": TOKEN, "base_url": "/s/8/", "ready_path": "/", "sample_s": 1}
    daemon, control = serve(session_task(8, {**session, "command": ["sh", "-c", script]}))
    run_until(daemon, lambda: latest(control, 8, lambda e: e["ready"]), timeout=30)
    url = latest(control, 8, lambda e: e["ready"])["url"]
    assert url == f"http://127.0.0.1:{daemon.sessions[8].port}/s/8/"
    assert httpx.get(url).status_code == 200
    run_until(daemon, lambda: latest(control, 8, lambda e: e["connections"] == 0), timeout=30)
    assert latest(control, 8)["last_activity"] is None

    with socket.create_connection(("127.0.0.1", daemon.sessions[8].port)):
        run_until(daemon, lambda: latest(control, 8)["connections"] == 1, timeout=30)
    run_until(daemon, lambda: latest(control, 8)["connections"] == 0, timeout=30)


def test_a_session_the_daemon_cannot_run_fails_to_start_with_the_reason(serve):
    daemon, control = serve(session_task(9, {"kind": "desktop", "token": TOKEN}))
    run_until(daemon, lambda: reports(control, "start_failed"))
    error = reports(control, "start_failed")[0]["error"]
    assert "session kind 'desktop' is not one of jupyter, port" in error
    assert not daemon.runner.processes

    class Elsewhere(RecordingRunner):
        mode = "slurm"

    daemon, control = serve(session_task(10, jupyter(10)), runner=Elsewhere())
    run_until(daemon, lambda: reports(control, "start_failed"))
    assert reports(control, "start_failed")[0]["error"] == "slurm mode does not run sessions"
    assert daemon.runner.started == []


@pytest.mark.django_db
def test_the_server_accepts_the_sessions_a_heartbeat_carries(make_daemon, pool, place, network):
    """The daemon against the real control plane; the claim answer is given a ``session`` object
    here when the server does not send one for this task."""
    (task,) = place(pool)
    sent = []
    handle = network.handle_request

    def recording(request):
        response = handle(request)
        path = request.url.path
        if path.endswith(("/claim", "/sync")) and response.status_code == 200:
            answer = json.loads(response.content)
            for claimed in answer["tasks"]:
                claimed.setdefault("session", None)
                claimed["session"] = claimed["session"] or jupyter(claimed["id"])
            response = httpx.Response(response.status_code, json=answer)
        if path.endswith("/heartbeat"):
            sent.append((json.loads(request.content), response.status_code))
        if path.endswith("/sync") and json.loads(request.content).get("heartbeat") is not None:
            sent.append((json.loads(request.content)["heartbeat"], response.status_code))
        return response

    network.handle_request = recording
    daemon = make_daemon(gpus=1)
    daemon.settings.session_host = "127.0.0.1"

    def ready():
        return [(b, s) for b, s in sent if b.get("sessions", {}).get(str(task.pk), {}).get("ready")]

    try:
        run_until(daemon, ready, timeout=60)
        body, status = ready()[0]
        assert status == 200
        entry = body["sessions"][str(task.pk)]
        assert entry["url"] == f"http://127.0.0.1:{daemon.sessions[task.pk].port}/sessions/{task.pk}/"
        assert Task.objects.get(pk=task.pk).state == Task.State.RUNNING
        # It runs on the GPU the claim gave it; no NVML here, so its utilisation is unknown, not 0.
        environ = open(f"/proc/{daemon.runner.pid(task.pk)}/environ").read().split("\0")
        assert "CUDA_VISIBLE_DEVICES=GPU-0" in environ
        assert entry["gpu_util"] is None
    finally:
        stop_all(daemon.runner)


def test_a_heartbeat_refused_for_its_sessions_is_sent_again_without_them(serve):
    class Strict(ScriptedControlPlane):
        def heartbeat(self, body):
            if "sessions" in body:
                self._call("refused", body)
                raise Rejected("HTTP 400: sessions", 400)
            return super().heartbeat(body)

    script = f"exec {sys.executable} -m http.server {{port}} --bind {{host}}"
    session = {"kind": "port", "token": TOKEN, "sample_s": 1, "command": ["sh", "-c", script]}
    daemon, strict = serve(session_task(11, session), control_class=Strict)
    run_until(daemon, lambda: reports(strict, "refused"))
    run_until(daemon, lambda: reports(strict, "refused")[-1]["sessions"]["11"]["ready"])
    count = len(reports(strict, "heartbeat"))
    run_until(daemon, lambda: len(reports(strict, "heartbeat")) > count + 2)
    assert all("sessions" not in body for body in reports(strict, "heartbeat"))
    assert len(reports(strict, "refused")) >= 3


def test_a_session_that_never_answers_is_measured_from_its_start_and_reported_not_ready(serve):
    """http.server without the base URL folder: 404 forever. It is measured all the same, so the
    control plane's CPU and lifetime limits can free its GPUs."""
    script = f"exec {sys.executable} -m http.server {{port}} --bind {{host}}"
    session = {"kind": "port", "token": TOKEN, "base_url": "/s/12/", "ready_path": "/", "sample_s": 1}
    daemon, control = serve(session_task(12, {**session, "command": ["sh", "-c", script]}))
    run_until(daemon, lambda: latest(control, 12, lambda e: e["cpu_percent"] is not None), timeout=30)
    entry = latest(control, 12, lambda e: e["cpu_percent"] is not None)
    assert (entry["ready"], entry["url"], entry["connections"]) == (False, None, 0)
    assert all(not entry["ready"] for entry in reported(control, 12))


class LostProcesses(ProcessRunner):
    """A runner that cannot find task 21's processes (its /proc unreadable, say)."""

    def pid(self, task_id):
        if task_id == 21:
            raise PermissionError(13, "Permission denied", "/proc/21")
        return super().pid(task_id)


def test_a_session_that_cannot_be_measured_is_reported_with_nulls_and_stops_nothing_else(
    serve, tmp_path, caplog
):
    script = f"mkdir -p .{{base_url}} && exec {sys.executable} -m http.server {{port}} --bind {{host}}"
    session = {
        "kind": "port",
        "token": TOKEN,
        "ready_path": "/",
        "sample_s": 1,
        "command": ["sh", "-c", script],
    }
    runner = LostProcesses(tmp_path / "state", tmp_path / "checkpoints")
    tasks = [
        session_task(21, {**session, "base_url": "/s/21/"}),
        session_task(22, {**session, "base_url": "/s/22/"}),
    ]
    daemon, control = serve(tasks, runner=runner)
    with caplog.at_level(logging.ERROR, logger="klique.worker"):
        run_until(
            daemon,
            lambda: latest(control, 22, lambda e: e["ready"] and e["cpu_percent"] is not None),
            timeout=30,
        )
        run_until(daemon, lambda: latest(control, 21, lambda e: e["ready"]), timeout=30)
    assert latest(control, 21)["cpu_percent"] is None and latest(control, 21)["connections"] is None
    assert any(r.getMessage() == "could not measure the session" for r in caplog.records)
    count = len(reports(control, "heartbeat"))
    run_until(daemon, lambda: len(reports(control, "heartbeat")) > count + 2)
