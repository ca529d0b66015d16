"""Cloud pools on the simulator's clock: the live autoscaler's rules (docs/cloud.md, "The pass").

The engine places on a cloud pool up to its maximum as on any pool. After each pass, per cloud
pool: nodes whose boot ended come up; tasks placed on the pool and not yet on a node are packed
onto up nodes, first fit in placement order (a task that does not fit does not block smaller ones
behind it); a node up and holding no task for `idle_timeout_s` is released; then, while the GPUs
placed on the pool (demand) exceed the GPUs of its booting and up nodes (supply), a node is
launched: the first type in list order with fewer live nodes than its `max` whose GPUs fit the
largest task waiting for a node, else the first that fits the smallest (when no type with room
fits any waiting task, none is launched: such a node would only idle out), on the spot market when
the type says spot and spot is available, on demand otherwise. A node is up `boot_s` after its
launch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scenario_model import CloudSpec

SPOT = "spot"
ON_DEMAND = "on-demand"


@dataclass(slots=True)
class Node:
    name: str
    type: int
    market: str
    launched_us: int
    ready_us: int
    capacity: int
    up: bool = False
    held: int = 0
    tasks: int = 0
    idle_since: int = 0


class CloudPool:
    """One cloud pool's nodes and the tasks placed on it that wait for room on a node."""

    def __init__(self, name: str, spec: CloudSpec):
        self.name = name
        self.spec = spec
        self.nodes: list[Node] = []
        self.launched = 0
        self.count = [0] * len(spec.types)
        self.waiting: dict[str, int] = {}
        self.on_node: dict[str, Node] = {}
        self.node_us: dict[tuple[int, str], int] = {}
        self.idle_us = 0

    # -- tasks ----------------------------------------------------------------------------------

    def place(self, task: str, size: int) -> None:
        """A task placed on the pool waits for room on a node (dicts keep placement order)."""
        self.waiting[task] = size

    def stop(self, task: str, size: int, end_us: int) -> None:
        """The task stopped at end_us: its node's room is free from then."""
        if self.waiting.pop(task, None) is not None:
            return
        node = self.on_node.pop(task)
        node.held -= size
        node.tasks -= 1
        if not node.tasks:
            node.idle_since = end_us

    # -- the autoscaler -------------------------------------------------------------------------

    def step(self, t: int, demand: int) -> tuple[list[str], list[dict]]:
        """Boots ended, packing, idle release and launches at t: (tasks started, node events)."""
        events: list[dict] = []
        self._up(t)
        started = self._pack(t)
        self._release_idle(t, events)
        if self._launch(t, demand, events) and self.spec.boot_us == 0:
            self._up(t)
            started += self._pack(t)
        return started, events

    def due(self) -> int | None:
        """The next time a node comes up or an idle node is released (None: nothing pending)."""
        times = [n.ready_us for n in self.nodes if not n.up]
        times += [n.idle_since + self.spec.idle_timeout_us for n in self.nodes if n.up and not n.tasks]
        return min(times, default=None)

    def _up(self, t: int) -> None:
        for node in self.nodes:
            if not node.up and node.ready_us <= t:
                node.up = True
                node.idle_since = node.ready_us

    def _pack(self, t: int) -> list[str]:
        started = []
        up = [n for n in self.nodes if n.up]
        if not up:
            return started
        for task, size in list(self.waiting.items()):
            node = next((n for n in up if n.held + size <= n.capacity), None)
            if node is None:
                continue
            if not node.tasks:
                self.idle_us += t - node.idle_since
            node.held += size
            node.tasks += 1
            self.on_node[task] = node
            del self.waiting[task]
            started.append(task)
        return started

    def _release_idle(self, t: int, events: list[dict]) -> None:
        timeout = self.spec.idle_timeout_us
        for node in [n for n in self.nodes if n.up and not n.tasks and t - n.idle_since >= timeout]:
            self.nodes.remove(node)
            self.count[node.type] -= 1
            self.idle_us += t - node.idle_since
            self._close(node, t)
            events.append(self._event("scaled_down", node) | {"reason": "idle"})

    def _launch(self, t: int, demand: int, events: list[dict]) -> bool:
        types = self.spec.types
        supply = sum(n.capacity for n in self.nodes)
        largest = max(self.waiting.values(), default=None)
        smallest = min(self.waiting.values(), default=None)
        launched = False
        while demand > supply and largest is not None:
            room = [i for i, ty in enumerate(types) if self.count[i] < ty.max]
            fits = [i for i in room if types[i].gpus >= largest] or [
                i for i in room if types[i].gpus >= smallest
            ]
            if not fits:
                break
            i = fits[0]
            ty = types[i]
            self.launched += 1
            market = SPOT if ty.spot and ty.spot_available else ON_DEMAND
            node = Node(f"{self.name}-{self.launched}", i, market, t, t + self.spec.boot_us, ty.gpus)
            self.nodes.append(node)
            self.count[i] += 1
            supply += ty.gpus
            launched = True
            events.append(self._event("scaled_up", node))
        return launched

    def _event(self, kind: str, node: Node) -> dict:
        return {
            "event": kind,
            "pool": self.name,
            "type": self.spec.types[node.type].name,
            "node": node.name,
            "market": node.market,
        }

    def _close(self, node: Node, end_us: int) -> None:
        key = (node.type, node.market)
        self.node_us[key] = self.node_us.get(key, 0) + end_us - node.launched_us

    # -- summary --------------------------------------------------------------------------------

    def summary(self, end_us: int, per_hour: int) -> dict:
        """Node-hours from launch to release (live nodes up to end_us), in total, for the time up
        and holding no task, and per type and market."""
        node_us = dict(self.node_us)
        idle_us = self.idle_us
        for node in self.nodes:
            key = (node.type, node.market)
            node_us[key] = node_us.get(key, 0) + end_us - node.launched_us
            if node.up and not node.tasks:
                idle_us += end_us - node.idle_since
            elif not node.up and node.ready_us <= end_us:
                idle_us += end_us - node.ready_us
        by_type: dict[str, dict[str, float]] = {}
        for i, ty in enumerate(self.spec.types):
            for market in (SPOT, ON_DEMAND):
                if (i, market) in node_us:
                    by_type.setdefault(ty.name, {})[market] = round(node_us[i, market] / per_hour, 6)
        return {
            "node_hours": round(sum(node_us.values()) / per_hour, 6),
            "idle_node_hours": round(idle_us / per_hour, 6),
            "node_hours_by_type": by_type,
        }
