"""Test settings: the base settings with fast password hashing and in-memory email."""

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
# Daemons in the live tests heartbeat many times a second; the throttle tests set low rates.
THROTTLE_RATES = {scope: "100000/min" for scope in ("worker", "heartbeat", "enrol", "token")}
