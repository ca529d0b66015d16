"""One pass at a time across every process and machine.

On PostgreSQL the pass holds a session-level advisory lock (``pg_try_advisory_lock``): a second
pass started anywhere sees it taken and skips. If the process holding it dies, PostgreSQL ends
its session and frees the lock.

On SQLite (the single-machine embedded default) the pass holds an exclusive ``flock`` on a lock
file beside the database file (``db.sqlite3.engine-lock``), taken without waiting: a second pass
in any process of the machine (``run_engine``, or a Celery worker with ``--concurrency 2``) sees
it taken and skips. The kernel frees the lock when the process holding it dies. Each attempt opens
the file anew, so two threads of one process exclude each other too. An in-memory database lives
in one process, so there (and where ``fcntl`` does not exist) a process-local lock serves.
"""

import os
import threading
from contextlib import contextmanager

from django.db import connection

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

PASS_LOCK_KEY = 0x6B6C6971  # "kliq"
_local_lock = threading.Lock()


@contextmanager
def exclusive_pass(key: int = PASS_LOCK_KEY):
    """Yield True while this process holds the pass lock, or False when another one does."""
    if connection.vendor == "postgresql":
        with _advisory_lock(key) as acquired:
            yield acquired
        return
    path = lock_file_path()
    if path is None or fcntl is None:
        with _process_lock() as acquired:
            yield acquired
        return
    with _file_lock(path) as acquired:
        yield acquired


@contextmanager
def _advisory_lock(key: int):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        acquired = cursor.fetchone()[0]
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


def lock_file_path(suffix: str = "engine-lock") -> str | None:
    """A lock file beside the SQLite database file; None for an in-memory database."""
    if connection.vendor != "sqlite" or connection.is_in_memory_db():
        return None
    return f"{connection.settings_dict['NAME']}.{suffix}"


@contextmanager
def _file_lock(path: str):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _process_lock():
    acquired = _local_lock.acquire(blocking=False)
    try:
        yield acquired
    finally:
        if acquired:
            _local_lock.release()
