"""Which of several ``run_engine`` processes is active: the one holding the leader lock. The
others stand by, trying it every ``STANDBY_POLL_S``, and the first to get it after the active one
dies runs a pass at once (docs/engine.md, "Several engine processes").

The lock only saves work (one process's held snapshot stays warm; the meter, the sweeps and the
schedules run once per interval): the pass lock (``apps.engine.lock``) alone keeps two passes
from ever running at once, even in the moment two processes both believe they lead.

On PostgreSQL it is a session-level advisory lock on a connection of its own, outside Django's
(whose connections ``close_old_connections`` may close between ticks, which would free it
silently). PostgreSQL frees it when the holder's session ends: a killed process, a closed socket.
Each ``hold()`` checks that the connection still answers; when it does not, this process stops
leading until it takes the lock again. On SQLite it is an ``flock`` on a file beside the database
(``db.sqlite3.engine-leader``), held open while leading; an in-memory database has one process.
"""

import logging
import os

from django.db import connection

from apps.engine.lock import PASS_LOCK_KEY, lock_file_path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

log = logging.getLogger("klique.engine")
LEADER_LOCK_KEY = PASS_LOCK_KEY + 1
STANDBY_POLL_S = 0.5


class Leadership:
    """This process's claim to lead; ``hold()`` before each tick, ``release()`` on the way out."""

    def __init__(self, key: int = LEADER_LOCK_KEY):
        self.key = key
        self.leading: bool | None = None  # not yet known: the first hold() says which it is
        self._conn = None
        self._fd: int | None = None

    def hold(self) -> bool:
        """True while this process leads: still holding the lock, or taking it now."""
        if connection.vendor == "postgresql":
            leading = self._hold_advisory()
        else:
            leading = self._hold_file()
        if leading != self.leading:
            log.info("engine %s", "active: holding the leader lock" if leading else "standing by")
        self.leading = leading
        return leading

    def _hold_advisory(self) -> bool:
        try:
            if self._conn is None:
                self._conn = connection.get_new_connection(connection.get_connection_params())
                self._conn.autocommit = True
            if self.leading:
                self._conn.execute("SELECT 1")
                return True
            return bool(self._conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()[0])
        except Exception:
            log.warning("the leader lock's connection failed; standing by until it is retaken", exc_info=True)
            self._close()
            return False

    def _hold_file(self) -> bool:
        path = lock_file_path("engine-leader")
        if path is None or fcntl is None or self._fd is not None:
            return True
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        """Give the lock up at once (a clean stop), so that a standby takes over without waiting:
        unlocked before the connection closes (a closing session frees it only once the server
        has ended it, a moment after the client let go)."""
        if self._conn is not None and self.leading:
            try:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", [self.key])
            except Exception:  # noqa: S110 - a broken connection frees it with its session
                pass
        self._close()
        self.leading = False

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: S110 - a broken connection is closed by the server anyway
                pass
            self._conn = None
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor frees the flock
            self._fd = None
