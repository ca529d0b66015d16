"""Stand-ins for what the daemon talks to, for tests that need no control plane, no processes
and no GPU: a pynvml module, a control plane that answers from a script, a runner that only
records, and a clock the test moves."""

import threading
import types

from klique.worker.client import Rejected, Unreachable


def fake_pynvml(count=2, fail_init=False):
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    memory = types.SimpleNamespace(total=80 << 30, used=1 << 30)
    module.NVMLError = NVMLError
    module.NVML_TEMPERATURE_GPU = 0
    module.nvmlInit = init
    module.nvmlDeviceGetCount = lambda: count
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetUUID = lambda h: f"GPU-uuid-{h}"
    module.nvmlDeviceGetName = lambda h: b"NVIDIA H100"
    module.nvmlDeviceGetMemoryInfo = lambda h: memory
    module.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + h)
    module.nvmlDeviceGetTemperature = lambda h, kind: 60
    return module


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedControlPlane:
    """Answers claims from ``claims`` (a list of task lists, then nothing), heartbeats with no
    commands, and raises Unreachable for everything while ``down``. Every call is recorded with
    the clock's time.

    ``sync`` answers as the control plane's one round trip does, from the same parts: each report,
    the heartbeat and the claim it carries is recorded as if sent on its own (after a ``sync``
    entry with the whole body), so tests that count heartbeats or claims hold either way. With
    ``syncs=False`` it answers 404, as a control plane from before it; ``separate`` lists the
    calls made on their own. ``wait`` answers from ``placed`` (a list of booleans; when empty it
    blocks until ``place()``, ``release()`` or its timeout), or 404 with ``waits=False``."""

    def __init__(
        self, clock: Clock, claims=(), heartbeat_s: float = 5.0, refuse=None, syncs=True, waits=True
    ):
        self.clock, self.claims, self.heartbeat_s = clock, list(claims), heartbeat_s
        self.claim_max_s: float | None = None  # a large estate's longest idle claim interval
        self.refuse = refuse  # refuse(what, body) -> True: the report is answered 400
        self.syncs, self.waits = syncs, waits
        self.down = False
        self.calls: list[tuple[str, float, dict]] = []
        self.adopted: list[dict] = []  # the enrol answer's tasks handed back
        self.commands: list[dict] = []  # the next heartbeat's commands
        self.placed: list[bool] = []  # what the next waits answer
        self.waits_asked: list[float] = []  # the clock's time of each wait
        self.separate: list[str] = []  # the reports, heartbeats and claims sent without sync
        self._in_sync = False
        self._wakeup = threading.Event()

    def _call(self, what: str, body: dict) -> None:
        self.calls.append((what, self.clock(), body))
        if not self._in_sync and what != "enrol":
            self.separate.append(what)
        if self.down:
            raise Unreachable("connection refused")

    def times(self, what: str) -> list[float]:
        return [at for kind, at, _ in self.calls if kind == what]

    def enrol(self, token, **body) -> dict:
        self._call("enrol", body)
        answer = {
            "worker": 1,
            "pool": "onprem",
            "pool_id": 1,
            "token": "kqw_x",
            "heartbeat_s": self.heartbeat_s,
        }
        return {**answer, "adopted": self.adopted}

    def heartbeat(self, body: dict) -> dict:
        self._call("heartbeat", body)
        commands, self.commands = self.commands, []
        answer = {"commands": commands, "heartbeat_s": self.heartbeat_s}
        return answer if self.claim_max_s is None else {**answer, "claim_max_s": self.claim_max_s}

    def claim(self, body: dict) -> list[dict]:
        self._call("claim", body)
        return self.claims.pop(0) if self.claims else []

    def report(self, task_id: int, what: str, body: dict) -> dict:
        self._call(what, body)
        if self.refuse is not None and self.refuse(what, body):
            raise Rejected("HTTP 400: refused", 400)
        return {"task": task_id, "state": "running", "yours": True}

    def sync(self, body: dict) -> dict:
        if not self.syncs:
            self.calls.append(("sync-404", self.clock(), body))
            raise Rejected("HTTP 404: not found", 404)
        self.calls.append(("sync", self.clock(), body))
        self._in_sync = True
        try:
            return self._sync(body)
        finally:
            self._in_sync = False

    def _sync(self, body: dict) -> dict:
        answer = {"reports": [], "heartbeat": None, "tasks": [], "claim_error": None}
        for item in body["reports"]:
            task_id, what = item["task"], item["what"]
            try:
                answer["reports"].append({"what": what, **self.report(task_id, what, item["body"])})
            except Rejected as error:
                answer["reports"].append(
                    {"task": task_id, "what": what, "status": error.status, "error": str(error)}
                )
        if body["heartbeat"] is not None:
            answer["heartbeat"] = self.heartbeat(body["heartbeat"])
        if body["claim"] is not None:
            try:
                answer["tasks"] = self.claim(body["claim"])
            except Rejected as error:
                answer["claim_error"] = {"status": error.status, "error": str(error)}
        return answer

    def wait(self, timeout_s: float) -> bool:
        self.waits_asked.append(self.clock())
        if not self.waits:
            raise Rejected("HTTP 404: not found", 404)
        if self.down:
            raise Unreachable("connection refused")
        if not self.placed:
            self._wakeup.wait(timeout_s)
            self._wakeup.clear()
        return self.placed.pop(0) if self.placed else False

    def place(self) -> None:
        """Work was placed: the wait in progress (or the next) answers true."""
        self.placed.append(True)
        self._wakeup.set()

    def release(self) -> None:
        """End the wait in progress with nothing placed."""
        self._wakeup.set()

    def close(self) -> None:
        self._wakeup.set()


class RecordingRunner:
    """Starts nothing; its tasks run until the test says otherwise. ``found``: what ``recover``
    returns (task id -> pool label; a list means work with no pool label)."""

    mode = "process"
    claims_total = False
    multi_node = False

    def __init__(self, found: dict[int, str] | list[int] | None = None):
        self.started: list[int] = []
        self.found = found if isinstance(found, dict) else dict.fromkeys(found or [], "")
        self.adopted: list[int] = []
        self.dropped: list[int] = []
        self.terminated: list[tuple[int, float]] = []
        self.killed: list[int] = []
        self.changes: list = []  # what the next poll reports

    def recover(self) -> dict[int, str]:
        return dict(self.found)

    def adopt(self, tasks: list[dict], drop: list[int]) -> None:
        self.adopted = [task["id"] for task in tasks]
        self.dropped = list(drop)

    def start(self, task: dict, devices: list[str]) -> None:
        self.started.append(task["id"])

    def poll(self) -> list:
        changes, self.changes = self.changes, []
        return changes

    def terminate(self, task_id: int, grace_s: float = 0) -> None:
        self.terminated.append((task_id, grace_s))

    def kill(self, task_id: int) -> None:
        self.killed.append(task_id)

    def log_tail(self, task_id: int) -> str:
        return ""


def task(task_id: int, gpus: str = "1") -> dict:
    return {"id": task_id, "command": "true", "gpus": gpus, "slots": [], "spec": {}, "preemption_count": 0}
