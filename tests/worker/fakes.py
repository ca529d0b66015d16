"""Stand-ins for what the daemon talks to, for tests that need no control plane, no processes
and no GPU: a pynvml module, a control plane that answers from a script, a runner that only
records, and a clock the test moves."""

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
    the clock's time."""

    def __init__(self, clock: Clock, claims=(), heartbeat_s: float = 5.0, refuse=None):
        self.clock, self.claims, self.heartbeat_s = clock, list(claims), heartbeat_s
        self.refuse = refuse  # refuse(what, body) -> True: the report is answered 400
        self.down = False
        self.calls: list[tuple[str, float, dict]] = []
        self.adopted: list[dict] = []  # the enrol answer's tasks handed back
        self.commands: list[dict] = []  # the next heartbeat's commands

    def _call(self, what: str, body: dict) -> None:
        self.calls.append((what, self.clock(), body))
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
        return {"commands": commands, "heartbeat_s": self.heartbeat_s}

    def claim(self, body: dict) -> list[dict]:
        self._call("claim", body)
        return self.claims.pop(0) if self.claims else []

    def report(self, task_id: int, what: str, body: dict) -> dict:
        self._call(what, body)
        if self.refuse is not None and self.refuse(what, body):
            raise Rejected("HTTP 400: refused", 400)
        return {"task": task_id, "state": "running", "yours": True}

    def close(self) -> None:
        pass


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
