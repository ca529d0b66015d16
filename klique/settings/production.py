"""Production settings: refuses to start on the development secret key or with DEBUG on."""

import os

from django.core.exceptions import ImproperlyConfigured
from whitenoise.compress import Compressor

from .base import *  # noqa: F401,F403
from .base import DEV_SECRET_KEY, MIDDLEWARE, REDIS_URL, SECRET_KEY, env_bool, env_list, logging_config

if SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY) < 32 or "change-me" in SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set to a random value of 32+ characters, not an example.")

DEBUG = env_bool("DEBUG", False)
if DEBUG:
    raise ImproperlyConfigured("DEBUG must be off in production.")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must name the hosts the control plane answers for.")

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

KLIQUE_ENV = "production"
# One JSON object a log line unless LOG_FORMAT=text (docs/operations.md).
LOG_FORMAT = os.environ.get("LOG_FORMAT") or "json"
LOGGING = logging_config(LOG_FORMAT)
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"
# Webhooks: https only in production unless hosts are named.
WEBHOOK_HTTP_HOSTS = env_list("WEBHOOK_HTTP_HOSTS", [])

# Login limits and throttles must count across every web process: without Redis, in a database
# table (``manage.py createcachetable`` makes it), never in one process's memory.
if not REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "klique_cache"}
    }
SILENCED_SYSTEM_CHECKS = []

# Static files served by the web processes themselves (whitenoise): hashed names, gzip and brotli
# copies written by collectstatic, and a year's cache for the hashed names.
_AFTER_SECURITY = MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1
WHITENOISE = "whitenoise.middleware.WhiteNoiseMiddleware"
MIDDLEWARE = [*MIDDLEWARE[:_AFTER_SECURITY], WHITENOISE, *MIDDLEWARE[_AFTER_SECURITY:]]
# klique.staticfiles compresses each distinct file once, large ones at brotli 9, and no source maps
# (collectstatic: 75 s of CPU before, 8 s after; docs/deploy.md, "Static files").
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "klique.staticfiles.StaticFilesStorage"},
}
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = (*Compressor.SKIP_COMPRESS_EXTENSIONS, "map")

# HTTPS behind a proxy that terminates TLS and sets X-Forwarded-Proto (SECURE_PROXY_SSL_HEADER):
# plain HTTP is redirected, except the probes (/healthz, /readyz answer before any redirect).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", str(365 * 24 * 3600)))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
