"""Test settings: the base settings with fast password hashing and in-memory email."""

import os

from .base import *  # noqa: F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

KLIQUE_ENV = "test"
# Each test process counts logins and throttles in its own memory, whatever REDIS_URL says; the
# tests of the shared (Redis) cache name it themselves.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
SILENCED_SYSTEM_CHECKS = ["axes.W001"]
# HTTP metrics in each test process's memory; the tests of the shared (Redis) counters name it.
HTTP_METRICS = "memory"
# Daemons in the live tests heartbeat many times a second; the throttle tests set low rates.
THROTTLE_RATES = {scope: "100000/min" for scope in ("worker", "heartbeat", "enrol", "token")}

# On SQLite the tests use a database file rather than Django's shared-cache memory database: a live
# server thread reading while the test writes then waits for the lock (the busy timeout), where
# the shared cache failed at once with "database table is locked" (a 500 in the live CLI tests).
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / f"test-{os.getpid()}.sqlite3")}  # noqa: F405

# Under pytest-xdist (`make test` runs on every core) each worker has a Redis database of its own,
# as pytest-django gives each its own SQL database: worker N > 0 uses REDIS_URL's number + 16 * N
# (deploy/dev-services starts Redis with 256 databases). Child processes inherit it.
_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if REDIS_URL and _xdist_worker.startswith("gw") and _xdist_worker != "gw0":  # noqa: F405
    from urllib.parse import urlsplit, urlunsplit

    _url = urlsplit(REDIS_URL)  # noqa: F405
    _db = int(_url.path.strip("/") or 0) + 16 * int(_xdist_worker[2:])
    REDIS_URL = urlunsplit(_url._replace(path=f"/{_db}"))
    os.environ["REDIS_URL"] = REDIS_URL
    CELERY_BROKER_URL = REDIS_URL
