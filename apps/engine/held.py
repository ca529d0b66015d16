"""The live engine's held snapshot: the estate and every waiting and placed task, kept between
passes and brought up to date from the change log (``apps.engine.changes``) instead of read again.

Each pass reads only the tasks that changed since the last (one query on the log's index, one for
their rows), then takes the per-pass readings every load takes (daemons' GPUs, budget use, reclaims,
spend caps; ``loader.assemble``). It reads everything again at the first pass of a process, after
any estate change or deleted task, when the log no longer reaches back to its last load (another
process pruned it, or the database was flushed or restored), when the triggers are missing, and on
demand (``forget``). Its snapshot is the one a full load would read from the same view of the
database: ``tests/engine_live/test_held_snapshot.py`` checks that on random change streams.

The engine's own verdict writes are not read back (the rule "own verdicts are not read back"):
the pass's apply tells the held snapshot, once its transaction has committed, which tasks its
verdict statements rewrote, with which key, in which transaction (``wrote_verdicts``). The next
load sets those keys in the held rows and leaves out of the log's read a task whose only change
since the last load is one row of that transaction; a task with any other change row (another
transaction's, or another statement of the engine's own) is read again, so nothing can be missed.

A queued task moves between its queue and ``held`` (waiting for dependencies) as its row's
``waits_on`` changes; a dependency's end rewrites its dependants' rows, so they are read again.
"""

import logging
from collections import Counter
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models.expressions import RawSQL

from apps.engine import changes, loader, task_rows
from apps.tasks.models import Task

log = logging.getLogger("klique.engine")
PRUNE_EVERY = 20  # passes between deletes of the change log's read rows
QUEUED, ACTIVE = Task.State.QUEUED, frozenset(Task.ACTIVE_STATES)


@dataclass
class Held:
    position: changes.Position
    estate: loader.Estate
    waiting: dict[int, tuple] = field(default_factory=dict)  # task id -> row
    # queued tasks waiting for dependencies: task id -> (order, core.HeldTask, stored verdict key)
    held: dict[int, tuple] = field(default_factory=dict)
    held_tuple: tuple | None = None
    arrays: Counter = field(default_factory=Counter)  # capped array -> its tasks waiting
    caps: dict[str, int] = field(default_factory=dict)  # capped array -> max_running
    placed: dict[int, tuple] = field(default_factory=dict)  # task id -> (order, core.PlacedTask)
    # compute resource -> task id -> (order, core.WaitingTask), and its queue in order
    members: dict[str, dict[int, tuple]] = field(default_factory=dict)
    queues: dict[str, tuple] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)  # compute resources whose queue changed
    placed_tuple: tuple | None = None
    # (compute resource, counted size) -> stored verdict key -> waiting task ids (``loader.verdict_groups``)
    keys: dict[tuple[str, int], dict[str | None, set[int]]] = field(default_factory=dict)
    multi_node: Counter = field(default_factory=Counter)  # compute resource -> multi-node tasks waiting
    passes: int = 0
    # The verdicts a committed transaction of the engine wrote since ``position``: (its id, task id -> key)
    own: tuple[int, dict[int, str | None]] | None = None

    def rekey(self, keys: dict[int, str | None]) -> list[int]:
        """Set the stored verdict key of the held tasks of ``keys``; returns those found."""
        found = []
        for pk, key in keys.items():
            row = self.waiting.get(pk)
            if row is not None:
                if row[7] != key:
                    self._unkey(row)
                    self.waiting[pk] = row = (*row[:7], key, *row[8:])
                    self._key(row)
                found.append(pk)
            elif pk in self.held:
                order, task, _ = self.held[pk]
                self.held[pk] = (order, task, key)
                found.append(pk)
        return found

    def take(self, rows) -> None:
        """Bring the tasks of ``rows`` (``task_rows.task_rows``) up to date: those held for their
        dependencies cost one more query, for what they wait for."""
        needs = task_rows.waits_for([row[0] for row in rows if row[1] == QUEUED and task_rows.is_held(row)])
        for row in rows:
            pk, state = row[0], row[1]
            old = self.waiting.pop(pk, None)
            if old is not None:
                self._unqueue(old)
            if self.placed.pop(pk, None) is not None:
                self.placed_tuple = None
            if self.held.pop(pk, None) is not None:
                self.held_tuple = None
            if state == QUEUED and task_rows.is_held(row):
                task = task_rows.held_task(row, needs.get(pk, ()))
                self.held[pk] = (task_rows.held_order(row), task, row[7])
                self.held_tuple = None
            elif state == QUEUED:
                self.waiting[pk] = row
                self._queue(row)
            elif state in ACTIVE:
                self.placed[pk] = (task_rows.placed_order(row), task_rows.placed_task(row))
                self.placed_tuple = None

    def _queue(self, row) -> None:
        resource = str(row[2])
        self.dirty.add(resource)
        self.members.setdefault(resource, {})[row[0]] = (
            task_rows.waiting_order(row),
            task_rows.waiting_task(row),
        )
        self._key(row)
        if row[8] > 1:
            self.multi_node[row[2]] += 1
        array = task_rows.capped_array(row)
        if array is not None:
            self.arrays[array] += 1
            self.caps[array] = row[16]

    def _unqueue(self, row) -> None:
        resource = str(row[2])
        self.dirty.add(resource)
        del self.members[resource][row[0]]
        self._unkey(row)
        if row[8] > 1:
            self.multi_node[row[2]] -= 1
            if not self.multi_node[row[2]]:
                del self.multi_node[row[2]]
        array = task_rows.capped_array(row)
        if array is not None:
            self.arrays[array] -= 1
            if not self.arrays[array]:
                del self.arrays[array]
                del self.caps[array]

    def _key(self, row) -> None:
        """File the waiting task under its stored verdict key."""
        self.keys.setdefault((str(row[2]), row[4]), {}).setdefault(row[7], set()).add(row[0])

    def _unkey(self, row) -> None:
        group = self.keys[(str(row[2]), row[4])]
        group[row[7]].discard(row[0])
        if not group[row[7]]:
            del group[row[7]]
            if not group:
                del self.keys[(str(row[2]), row[4])]

    def tasks(self) -> task_rows.Tasks:
        for resource in self.dirty:
            members = self.members.get(resource)
            if members:
                self.queues[resource] = tuple(task for _, task in sorted(members.values(), key=_first))
            else:
                self.members.pop(resource, None)
                self.queues.pop(resource, None)
        self.dirty.clear()
        if self.placed_tuple is None:
            self.placed_tuple = tuple(task for _, task in sorted(self.placed.values(), key=_first))
        if self.held_tuple is None:
            self.held_tuple = tuple(task for _, task, _ in sorted(self.held.values(), key=_first))
        return task_rows.Tasks(
            waiting=dict(self.queues),
            verdict_keys={group: dict(stored) for group, stored in self.keys.items()},
            multi_node_resources=set(self.multi_node),
            placed=self.placed_tuple,
            held=self.held_tuple,
            held_keys={pk: key for pk, (_, _, key) in self.held.items()},
            arrays={array: self.caps[array] for array in self.arrays},
        )


def _first(pair):
    return pair[0]


_held: Held | None = None
_warned = False


def forget() -> None:
    """Drop the held snapshot: the next pass reads everything again."""
    global _held
    _held = None


def load(now) -> loader.Loaded:
    """The snapshot at ``now``, inside the caller's repeatable-read transaction (the pass's own,
    outermost: a caller's transaction would show the held snapshot its own uncommitted writes)."""
    global _held
    held, _held = _held, None
    position = changes.position()
    if position is None or not _caught_up(held, position):
        held = _read_all(position, now)
    if held is None:
        return loader.load(now)
    loaded = loader.assemble(now, held.estate, held.tasks())
    _held = held
    return loaded


def _caught_up(held: Held | None, position: changes.Position) -> bool:
    """Bring ``held`` up to ``position`` from the log; False when it cannot be (read everything)."""
    if held is None or held.position.token != position.token or not changes.still_valid(held.position):
        return False
    if changes.estate_changed(held.position):
        return False
    own, held.own = held.own, None
    skipped = None
    if own is not None:
        skipped = (own[0], held.rekey(own[1]))
    changed = RawSQL(*changes.changed_tasks(held.position, skipped))
    held.take(task_rows.task_rows(Task.objects.filter(pk__in=changed)))
    held.position = position
    held.passes += 1
    return True


def _read_all(position: changes.Position | None, now) -> Held | None:
    global _warned
    if position is None:  # a flushed log: the next pass creates its epoch row
        return None
    if not changes.supported():
        if not _warned:
            log.warning("the engine's change log is missing triggers: every pass loads everything")
            _warned = True
        return None
    held = Held(position=position, estate=loader.load_estate(now))
    held.take(task_rows.task_rows(Task.objects.filter(state__in=[QUEUED, *ACTIVE])))
    return held


def wrote_verdicts(mark: int, keys: dict[int, str | None]) -> None:
    """Called by the apply in its transaction (``mark``: its id): once it has committed, the held
    snapshot (the one this pass loaded, if still held at the same position) takes ``keys``."""
    held = _held
    if held is None or not keys:
        return
    position = held.position

    def committed():
        if _held is held and held.position == position:
            if held.own is None:
                held.own = (mark, dict(keys))
            elif held.own[0] == mark:
                both = held.own[1].keys() & keys.keys()
                merged = {**held.own[1], **keys}
                for pk in both:  # written twice: two change rows, read again
                    del merged[pk]
                held.own = (mark, merged)
            else:
                held.own = (mark, {})  # two transactions since the load: skip nothing

    transaction.on_commit(committed)


def before_pass() -> None:
    """Outside the pass's transaction: create the epoch row when nothing is held (the first pass,
    or after a flush), so the load that follows can hold its snapshot."""
    if _held is None:
        changes.ensure_epoch()


def after_pass() -> None:
    """Outside the pass's transaction: every ``PRUNE_EVERY`` passes, delete the changes the held
    snapshot has read."""
    held = _held
    if held is not None and held.passes and held.passes % PRUNE_EVERY == 0:
        changes.prune(held.position)
