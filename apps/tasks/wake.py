"""Passes on demand and waking workers: the one place that says who wakes whom (docs/engine.md,
"Passes on demand and waking workers").

- ``request_pass()`` asks for an engine pass now (after a submit, a report that ends work, a
  cancel). With Redis it marks a pass *wanted*, wakes the ``run_engine`` loop (a one-element list
  it waits on with ``BLPOP``) and, in Celery mode, enqueues ``klique.engine.run_pass`` unless one
  is queued already. Without Redis, on a SQLite file database, it touches a wake file beside the
  database that the ``run_engine`` loop watches; otherwise it does nothing and the interval
  stays the bound.
- A pass clears *wanted* before it loads its snapshot (``pass_starting``); whoever ran it asks
  ``pass_wanted()`` afterwards and runs one more when a request came in meanwhile.
- ``notify_placed(pool_ids)`` is called once a pass's decisions have committed: it publishes the
  pools that got placements on one Redis channel. ``wait_placed(pool_id, timeout_s)`` blocks a
  request thread until such a notify (or claimable work) for its pool. One subscriber thread per
  process listens on the channel and wakes the waiting threads through a ``threading.Condition``;
  without Redis, ``wait_placed`` polls the claimable-task index every ``POLL_S``.

Nothing here raises to its caller: a Redis failure is logged and the interval takes over.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import connection, transaction

log = logging.getLogger("klique.engine.wake")

WANTED_KEY = "klique:engine:pass-wanted"
WAKE_KEY = "klique:engine:wake"
QUEUED_KEY = "klique:engine:pass-queued"
PLACED_CHANNEL = "klique:engine:placed"
QUEUED_TTL_S = 5
RETRY_COUNTDOWN_S = 0.2
POLL_S = 0.2
FILE_POLL_S = 0.05
SUBSCRIBE_WAIT_S = 2.0

_clients: dict[str, object] = {}
_clients_lock = threading.Lock()


def redis_url() -> str:
    return getattr(settings, "REDIS_URL", "") or ""


def _client(blocking: bool = False):
    """A Redis client shared by the process (thread-safe pool); ``blocking`` has no socket
    timeout, for BLPOP and the subscriber."""
    url = redis_url()
    key = f"{url}|{blocking}"
    client = _clients.get(key)
    if client is None:
        import redis

        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                timeout = None if blocking else 2.0
                client = redis.Redis.from_url(
                    url, socket_timeout=timeout, socket_connect_timeout=2.0, health_check_interval=30
                )
                _clients[key] = client
    return client


def celery_mode() -> bool:
    """Passes run as Celery tasks (Redis set and ENGINE_WAKE_CELERY not turned off)."""
    return bool(redis_url()) and getattr(settings, "ENGINE_WAKE_CELERY", True)


# --- asking for a pass -------------------------------------------------------------------------


def request_pass() -> None:
    """Ask for an engine pass now; after the current transaction commits when inside one.
    Never raises."""
    try:
        transaction.on_commit(_request_now)
    except Exception:
        log.exception("could not ask for an engine pass; the next interval's pass will run")


def _request_now() -> None:
    try:
        if redis_url():
            _request_redis()
        else:
            _touch_wake_file()
    except Exception:
        log.exception("could not ask for an engine pass; the next interval's pass will run")


def _request_redis() -> None:
    pipe = _client().pipeline(transaction=False)
    pipe.set(WANTED_KEY, "1")
    pipe.lpush(WAKE_KEY, "1")
    pipe.ltrim(WAKE_KEY, 0, 0)
    if celery_mode():
        pipe.set(QUEUED_KEY, "1", nx=True, ex=QUEUED_TTL_S)
    replies = pipe.execute()
    if celery_mode() and replies[-1]:
        _enqueue(countdown=0)


def _enqueue(countdown: float) -> None:
    from klique.celery import app

    expires = max(settings.ENGINE_PASS_INTERVAL_S, 1.0) * 5 + countdown
    app.send_task("klique.engine.run_pass", queue="engine", countdown=countdown or None, expires=expires)


def pass_starting() -> None:
    """Called by a pass once it holds the pass lock, before it loads: the requests so far are
    served by this pass."""
    try:
        if redis_url():
            _client().delete(WANTED_KEY)
        else:
            _consume_wake_file()
    except Exception:
        log.exception("could not clear the wanted-pass mark")


def pass_wanted() -> bool:
    """Whether a pass was asked for since the last pass started."""
    try:
        if redis_url():
            return bool(_client().exists(WANTED_KEY))
        return _wake_file_changed()
    except Exception:
        log.exception("could not read the wanted-pass mark")
        return False


def task_started() -> None:
    """The Celery run_pass task started: a request from now on queues another one."""
    try:
        if celery_mode():
            _client().delete(QUEUED_KEY)
    except Exception:
        log.exception("could not clear the queued-pass mark")


def after_task_pass(lock_taken: bool) -> None:
    """After the Celery run_pass task: when a request is pending, queue one more pass (after a
    short countdown when another pass held the lock, so that pass's end is not raced). At most
    one is queued however many requests came in."""
    try:
        if not celery_mode() or not pass_wanted():
            return
        if _client().set(QUEUED_KEY, "1", nx=True, ex=QUEUED_TTL_S):
            _enqueue(countdown=RETRY_COUNTDOWN_S if lock_taken else 0)
    except Exception:
        log.exception("could not queue the wanted pass; the next interval's pass will run")


def wait_for_request(timeout_s: float) -> bool:
    """Block the ``run_engine`` loop until a pass is requested or ``timeout_s`` passes; True if
    requested. A request already pending returns at once."""
    timeout_s = max(0.0, timeout_s)
    try:
        if redis_url():
            if pass_wanted():
                _client().delete(WAKE_KEY)
                return True
            if timeout_s <= 0:
                return False
            # BLPOP takes whole or fractional seconds (Redis >= 6); 0 would mean forever.
            got = _client(blocking=True).blpop([WAKE_KEY], timeout=max(timeout_s, 0.01))
            return got is not None or pass_wanted()
        if _wake_file_path() is not None:
            deadline = time.monotonic() + timeout_s
            while True:
                if _wake_file_changed():
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(FILE_POLL_S, left))
    except Exception:
        log.exception("waiting for a pass request failed; sleeping to the interval")
    time.sleep(timeout_s)
    return False


# --- the wake file (SQLite without Redis) ------------------------------------------------------

_seen_wake_mtime: dict[str, int] = {}


def _wake_file_path() -> str | None:
    if connection.vendor != "sqlite" or connection.is_in_memory_db():
        return None
    return f"{connection.settings_dict['NAME']}.engine-wake"


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


def _touch_wake_file() -> None:
    path = _wake_file_path()
    if path is None:
        return
    with open(path, "a"):
        pass
    # A new mtime every request even within one clock tick of the file system.
    now = time.time_ns()
    mtime = max(now, _mtime(path) + 1)
    os.utime(path, ns=(mtime, mtime))


def _wake_file_changed() -> bool:
    path = _wake_file_path()
    if path is None:
        return False
    return _mtime(path) > _seen_wake_mtime.get(path, 0)


def _consume_wake_file() -> None:
    path = _wake_file_path()
    if path is not None:
        _seen_wake_mtime[path] = _mtime(path)


# --- waking worker daemons ---------------------------------------------------------------------


def notify_placed(pool_ids) -> None:
    """Wake the daemons waiting on these pools (called after a pass's decisions commit).
    Never raises."""
    ids = sorted({int(pool) for pool in pool_ids})
    if not ids or not redis_url():
        return
    try:
        _client().publish(PLACED_CHANNEL, ",".join(str(pool) for pool in ids))
    except Exception:
        log.exception("could not notify the waiting workers; they poll at their timeout")


def claimable(pool_id: int) -> bool:
    """Whether the pool has placed tasks no worker has claimed yet (``task_claimable_idx``)."""
    from apps.tasks.models import Task

    return Task.objects.filter(state=Task.State.PLACED, pool_id=pool_id, worker__isnull=True).exists()


def wait_placed(pool_id: int, timeout_s: float) -> bool:
    """Block this thread until work is placed in the pool or ``timeout_s`` passes; True if woken
    (or if the pool has claimable tasks already)."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    if redis_url():
        hub = _hub()
        if hub.ready(SUBSCRIBE_WAIT_S):
            return hub.wait(pool_id, deadline)
    while True:
        if claimable(pool_id):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(POLL_S, left))


def _release_connection() -> None:
    """Close this thread's database connection before a long wait, so that waiting daemons hold
    web threads but no PostgreSQL connections (outside a transaction only: a test's or an atomic
    request's connection stays)."""
    if not connection.in_atomic_block:
        connection.close()


class _PlacedHub:
    """One subscriber thread per process; waiting threads sleep on one condition and compare the
    count of notifies for their pool. A reconnect bumps ``epoch``, so waiters re-read the
    database (a notify may have been missed while disconnected)."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.counts: dict[int, int] = {}
        self.epoch = 0
        self.waiters = 0
        self.subscribed = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        with self.condition:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._listen, name="klique-placed-subscriber", daemon=True
                )
                self.thread.start()

    def ready(self, timeout_s: float) -> bool:
        self.start()
        return self.subscribed.wait(timeout_s)

    def wait(self, pool_id: int, deadline: float) -> bool:
        with self.condition:
            seen, epoch = self.counts.get(pool_id, 0), self.epoch
        if claimable(pool_id):
            return True
        _release_connection()
        with self.condition:
            self.waiters += 1
            try:
                while True:
                    if self.counts.get(pool_id, 0) != seen:
                        return True
                    if self.epoch != epoch:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.condition.wait(left)
            finally:
                self.waiters -= 1
        return claimable(pool_id) or wait_placed(pool_id, deadline - time.monotonic())

    def _listen(self) -> None:
        delay = 0.5
        while True:
            try:
                pubsub = _client(blocking=True).pubsub()
                pubsub.subscribe(PLACED_CHANNEL)
                # Ready only once Redis confirmed the subscription: no notify after it is missed.
                confirmed = pubsub.get_message(timeout=SUBSCRIBE_WAIT_S * 2)
                if not confirmed or confirmed.get("type") != "subscribe":
                    raise ConnectionError("no subscribe confirmation from Redis")
                self._reconnected()
                delay = 0.5
                while True:
                    message = pubsub.get_message(timeout=10.0)
                    if message is None:
                        pubsub.ping()
                    elif message.get("type") == "message":
                        self._deliver(message["data"])
            except Exception:
                self.subscribed.clear()
                log.warning("placed-work subscriber lost Redis; reconnecting", exc_info=True)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _reconnected(self) -> None:
        with self.condition:
            self.epoch += 1
            self.subscribed.set()
            self.condition.notify_all()

    def _deliver(self, data) -> None:
        if isinstance(data, bytes):
            data = data.decode()
        pools = [int(part) for part in str(data).split(",") if part.strip().isdigit()]
        with self.condition:
            for pool in pools:
                self.counts[pool] = self.counts.get(pool, 0) + 1
            self.condition.notify_all()


_hubs: dict[str, _PlacedHub] = {}


def _hub() -> _PlacedHub:
    url = redis_url()
    with _clients_lock:
        hub = _hubs.get(url)
        if hub is None:
            hub = _hubs[url] = _PlacedHub()
    return hub
