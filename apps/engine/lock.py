"""One pass at a time across every process and machine.

On PostgreSQL the pass holds a session-level advisory lock (``pg_try_advisory_lock``): a second
pass started anywhere sees it taken and skips. If the process holding it dies, PostgreSQL ends
its session and frees the lock. On SQLite (the single-machine embedded default) a process-local
lock serves.
"""

import threading
from contextlib import contextmanager

from django.db import connection

PASS_LOCK_KEY = 0x6B6C6971  # "kliq"
_local_lock = threading.Lock()


@contextmanager
def exclusive_pass(key: int = PASS_LOCK_KEY):
    """Yield True while this process holds the pass lock, or False when another one does."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            acquired = cursor.fetchone()[0]
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    acquired = _local_lock.acquire(blocking=False)
    try:
        yield acquired
    finally:
        if acquired:
            _local_lock.release()
