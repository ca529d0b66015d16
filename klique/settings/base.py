"""Settings read from the environment.

``DATABASE_URL`` defaults to an SQLite file in the checkout (the embedded default), so
``make run`` needs nothing but Python. ``REDIS_URL`` switches the engine from the in-process
loop to Celery beat and workers.
"""

import os
from pathlib import Path

import dj_database_url

from klique.settings.sso import saml_apps

BASE_DIR = Path(__file__).resolve().parent.parent.parent
DEV_SECRET_KEY = "klique-dev-only-insecure-secret-key-change-me"


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


SECRET_KEY = os.environ.get("SECRET_KEY", DEV_SECRET_KEY)
DEBUG = env_bool("DEBUG", True)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_tables2",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.socialaccount.providers.saml",
    "apps.accounts",
    "apps.scim",
    "apps.pools",
    "apps.cloud",
    "apps.policies",
    "apps.tasks",
    "apps.sessions",
    "apps.workers",
    "apps.engine",
    "apps.ledger",
    "apps.pricing",
    "apps.portal",
    "apps.governance",
    "apps.webhooks",
    "apps.whatif",
    "axes",
]

MIDDLEWARE = [
    "apps.core.health.HealthMiddleware",
    # HTTP metrics (docs/deploy.md, "Metrics"): after the probes, so those are not counted.
    "apps.core.http_metrics.HttpMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Reads remembered for the request only (apps/core/memo.py): roles and the group tree.
    "apps.core.memo.RequestMemoMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "klique.urls"
WSGI_APPLICATION = "klique.wsgi.application"
ASGI_APPLICATION = "klique.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.portal.context_processors.portal",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "60")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default serves a portal, an engine loop and a demo load at once.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))

# Portal login (django-allauth): username or email and a password, password reset by email, and
# single sign-on through an OpenID Connect provider when OIDC_PROVIDER_URL and OIDC_CLIENT_ID are
# set. Accounts come from IT or from the SSO provider: there is no self sign-up. The admin keeps
# its own login page. See docs/portal.md.
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "/"
AUTHENTICATION_BACKENDS = [
    "apps.portal.auth.LoginLimitBackend",
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_ADAPTER = "apps.portal.auth.AccountAdapter"
ACCOUNT_LOGOUT_REDIRECT_URL = "account_login"
ACCOUNT_PASSWORD_RESET_BY_CODE_ENABLED = False
SOCIALACCOUNT_ADAPTER = "apps.portal.auth.SocialAccountAdapter"
# Signing in as the local account whose email the provider asserts is only safe with a provider
# that fully verifies emails (your own IdP): opt in with OIDC_TRUST_EMAIL=1.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = env_bool("OIDC_TRUST_EMAIL", False)
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = SOCIALACCOUNT_EMAIL_AUTHENTICATION
OIDC_PROVIDER_URL = os.environ.get("OIDC_PROVIDER_URL", "")
OIDC_CLIENT_ID = os.environ.get("OIDC_CLIENT_ID", "")
SOCIALACCOUNT_PROVIDERS = {
    "openid_connect": {
        "APPS": [
            {
                "provider_id": os.environ.get("OIDC_PROVIDER_ID", "sso"),
                "name": os.environ.get("OIDC_PROVIDER_NAME", "Single sign-on"),
                "client_id": OIDC_CLIENT_ID,
                "secret": os.environ.get("OIDC_CLIENT_SECRET", ""),
                "settings": {"server_url": OIDC_PROVIDER_URL},
            }
        ]
        if OIDC_PROVIDER_URL and OIDC_CLIENT_ID
        else [],
        "OAUTH_PKCE_ENABLED": True,
    }
}
# SSO roles (docs/governance.md): at each OIDC login, the memberships the identity provider grants
# are synced from these claims' values "<OIDC_ROLE_PREFIX><group slug>[:<role>]". Both names empty:
# no sync.
OIDC_GROUPS_CLAIM = os.environ.get("OIDC_GROUPS_CLAIM", "groups")
OIDC_ROLES_CLAIM = os.environ.get("OIDC_ROLES_CLAIM", "roles")
OIDC_ROLE_PREFIX = os.environ.get("OIDC_ROLE_PREFIX", "klique:")

# SAML 2.0 single sign-on (docs/governance.md, "Connecting an identity provider").
SOCIALACCOUNT_PROVIDERS["saml"] = {"APPS": saml_apps(os.environ)}
# Where a login button's form may lead (the Content-Security-Policy's form-action): the OIDC
# provider, and the SAML IdP's host (its metadata's; Keycloak, Entra ID and Okta serve their login
# pages there), or SAML_IDP_LOGIN_ORIGIN.
SSO_ORIGINS = [
    url
    for url in (
        OIDC_PROVIDER_URL,
        os.environ.get("SAML_IDP_LOGIN_ORIGIN")
        or "/".join(os.environ.get("SAML_IDP_METADATA_URL", "").split("/")[:3]),
    )
    if url
]
# SSO roles from a SAML login: these attributes' values, by the same rule as the OIDC claims.
SAML_GROUPS_ATTRIBUTE = os.environ.get("SAML_GROUPS_ATTRIBUTE", "groups")
SAML_ROLES_ATTRIBUTE = os.environ.get("SAML_ROLES_ATTRIBUTE", "")

REDIS_URL = os.environ.get("REDIS_URL", "")
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# Where the HTTP request counters of /metrics live: "redis" (shared by every web process; the
# default with REDIS_URL), "memory" (this process; the default without) or "off".
HTTP_METRICS = os.environ.get("HTTP_METRICS", "")

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "klique@localhost")

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "apps.core.schema.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.api.authentication.PersonalTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["apps.core.filters.StrictFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "apps.core.pagination.LimitOffset",
    # JSON only; depth, NUL and lone surrogates refused as 400 (apps/core/parsers.py, docs/channels.md).
    "DEFAULT_PARSER_CLASSES": ["apps.core.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "PAGE_SIZE": 50,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Klique control plane API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Request bodies get components of their own (``SubmitRequest``), so that a text field that
    # refuses blank text says minLength: 1 there while answers may still hold "".
    "COMPONENT_SPLIT_REQUEST": True,
    # Two choice sets share the field name "kind": a task's (batch, session) and its events'.
    "ENUM_NAME_OVERRIDES": {
        "TaskKindEnum": "apps.tasks.models.Task.Kind",
        "TaskEventKindEnum": "apps.tasks.models.TaskEvent.Kind",
        "ChangeRequestKindEnum": "apps.governance.models.ChangeRequest.Kind",
        "ChangeRequestStateEnum": "apps.governance.models.ChangeRequest.State",
        "StateEnum": "apps.tasks.models.Task.State",
        "RoleEnum": "apps.accounts.models.Membership.Role",
        "WhatIfRunStateEnum": "apps.whatif.models.WhatIfRun.State",
        "QuotaLoanWhatEnum": "apps.policies.models.QuotaLoan.What",
        "BudgetPeriodEnum": "apps.policies.models.ResourcePolicy.Period",
    },
}


def logging_config(log_format: str) -> dict:
    """``LOG_FORMAT``: ``text`` (development and tests) or ``json``, one object a line with the
    pass, task and pool ids (``klique.jsonlog``; production's default, docs/operations.md)."""
    if log_format not in ("text", "json"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, not {log_format!r}")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "text": {"()": "klique.jsonlog.TextFormatter"},
            "json": {"()": "klique.jsonlog.JsonFormatter"},
        },
        "filters": {
            "celery_task": {"()": "apps.core.logs.CeleryTaskFilter"},
            "worker_access": {"()": "apps.core.logs.WorkerAccessFilter"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": log_format, "filters": ["celery_task"]}
        },
        "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
        "loggers": {
            "django.db.backends": {"level": "WARNING"},
            "django.server": {"handlers": ["console"], "filters": ["worker_access"], "propagate": False},
        },
    }


LOG_FORMAT = os.environ.get("LOG_FORMAT") or "text"
LOGGING = logging_config(LOG_FORMAT)
# In JSON, Celery's worker keeps the handler above instead of installing its own text one.
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"

# Celery: Redis as broker when REDIS_URL is set. Without it (the embedded default) the engine
# runs in-process through ``manage.py run_engine`` and Celery is not used.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# beat touches KLIQUE_ALIVE_FILE on each tick (klique/liveness.py), at least once a minute.
CELERY_BEAT_SCHEDULER = "klique.liveness:AliveScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 60
# Periodic work; each entry's ``expires`` equals its interval so a slow run never piles up. The
# pass, the meter, the worker sweep and the cloud autoscaler each have their own queue, so each can
# be given a worker of its own (the Procfile's one worker consumes
# ``-Q engine,meter,sweep,autoscale,celery``).
ENGINE_PASS_INTERVAL_S = float(os.environ.get("ENGINE_PASS_INTERVAL_S", "1"))
LOW_WATERMARK_S = int(os.environ.get("LOW_WATERMARK_S", "900"))
PASS_LOG_DAYS = int(os.environ.get("PASS_LOG_DAYS", "7"))
SCHEDULE_INTERVAL_S = float(os.environ.get("SCHEDULE_INTERVAL_S", "15"))
# How often the agents' daily and monthly caps are swept (docs/governance.md, "Agents").
AGENT_CAP_INTERVAL_S = float(os.environ.get("AGENT_CAP_INTERVAL_S", "60"))
# The most tasks one POST /api/v1/tasks/bulk/ may submit (docs/channels.md).
TASKS_BULK_MAX = int(os.environ.get("TASKS_BULK_MAX", "1000"))
# Worker daemons (docs/workers.md): how often they heartbeat, when a silent one is lost, how long a
# placement may wait for a claim, and the grace between SIGTERM and SIGKILL on a stop.
WORKER_HEARTBEAT_S = float(os.environ.get("WORKER_HEARTBEAT_S", "5"))
WORKER_HEARTBEAT_TIMEOUT_S = float(os.environ.get("WORKER_HEARTBEAT_TIMEOUT_S", "30"))
# The estate's budget of periodic daemon syncs a second: past WORKER_SYNCS_PER_S x WORKER_HEARTBEAT_S
# daemons the heartbeat interval (and the timeout with it) grows (apps/workers/heartbeats.py).
WORKER_SYNCS_PER_S = float(os.environ.get("WORKER_SYNCS_PER_S", "100"))
WORKER_CLAIM_TIMEOUT_S = float(os.environ.get("WORKER_CLAIM_TIMEOUT_S", "120"))
# The longest a daemon may wait at POST /api/v1/workers/wait for placed work; 0 turns waiting off.
WORKER_WAIT_MAX_S = float(os.environ.get("WORKER_WAIT_MAX_S", "20"))
WORKER_STOP_GRACE_S = int(os.environ.get("WORKER_STOP_GRACE_S", "30"))
# The most reports one POST /api/v1/workers/sync may carry.
WORKER_SYNC_MAX_REPORTS = int(os.environ.get("WORKER_SYNC_MAX_REPORTS", "1000"))
# A task whose work fails to start this many times (on any workers) ends failed (docs/workers.md).
WORKER_START_ATTEMPTS = int(os.environ.get("WORKER_START_ATTEMPTS", "3"))
# How often the usage ledger's hourly and daily rollups are brought up to date (docs/ledger.md).
LEDGER_ROLLUP_INTERVAL_S = float(os.environ.get("LEDGER_ROLLUP_INTERVAL_S", "60"))
# Cloud pools (docs/cloud.md): how often the autoscaler passes, the URL its nodes' workers enrol
# at, and extra KLIQUE_* variables for every node's boot script (e.g. the worker's poll bounds).
AUTOSCALE_INTERVAL_S = float(os.environ.get("AUTOSCALE_INTERVAL_S", "10"))
# How long the engine reuses its reading of which cloud spend caps are reached.
CLOUD_CAP_CHECK_S = float(os.environ.get("CLOUD_CAP_CHECK_S", "30"))
KLIQUE_PUBLIC_URL = os.environ.get("KLIQUE_PUBLIC_URL", "http://127.0.0.1:8000")
CLOUD_NODE_ENVIRONMENT: dict[str, str] = {}
# Sessions (docs/sessions.md): how often the idle limits are checked, how long before an idle stop
# the owner is warned, and how often a worker samples a session's activity.
SESSION_CHECK_INTERVAL_S = float(os.environ.get("SESSION_CHECK_INTERVAL_S", "5"))
SESSION_IDLE_WARNING_S = int(os.environ.get("SESSION_IDLE_WARNING_S", "300"))
SESSION_SAMPLE_S = float(os.environ.get("SESSION_SAMPLE_S", "10"))
# The session gateway (klique-gateway, docs/sessions.md): where browsers open sessions (empty: at
# the address the worker reports, which needs an inbound port on the worker) and where workers
# open their tunnel (empty: the gateway's URL as ws(s)://.../tunnel/).
SESSION_GATEWAY_URL = os.environ.get("KLIQUE_SESSION_GATEWAY_URL", "").rstrip("/")
SESSION_TUNNEL_URL = os.environ.get("KLIQUE_SESSION_TUNNEL_URL", "")
CELERY_TASK_ROUTES = {
    "klique.cloud.autoscale": {"queue": "autoscale"},
    "klique.whatif.run": {"queue": "whatif"},
}
CELERY_BEAT_SCHEDULE: dict[str, dict] = {
    "engine-pass": {
        "task": "klique.engine.run_pass",
        "schedule": ENGINE_PASS_INTERVAL_S,
        "options": {"queue": "engine", "expires": ENGINE_PASS_INTERVAL_S},
    },
    "budget-meter": {
        "task": "klique.engine.run_meter",
        "schedule": ENGINE_PASS_INTERVAL_S,
        "options": {"queue": "meter", "expires": ENGINE_PASS_INTERVAL_S},
    },
    "schedules": {
        "task": "klique.tasks.submit_due_schedules",
        "schedule": SCHEDULE_INTERVAL_S,
        "options": {"expires": SCHEDULE_INTERVAL_S},
    },
    "agent-caps": {
        "task": "klique.tasks.agent_caps",
        "schedule": AGENT_CAP_INTERVAL_S,
        "options": {"queue": "sweep", "expires": AGENT_CAP_INTERVAL_S},
    },
    "worker-sweep": {
        "task": "klique.pools.sweep",
        "schedule": ENGINE_PASS_INTERVAL_S,
        "options": {"queue": "sweep", "expires": ENGINE_PASS_INTERVAL_S},
    },
    "autoscale": {
        "task": "klique.cloud.autoscale",
        "schedule": AUTOSCALE_INTERVAL_S,
        "options": {"queue": "autoscale", "expires": AUTOSCALE_INTERVAL_S},
    },
    "session-idle": {
        "task": "klique.sessions.check_idle",
        "schedule": SESSION_CHECK_INTERVAL_S,
        "options": {"queue": "sweep", "expires": SESSION_CHECK_INTERVAL_S},
    },
    "whatif-stale": {
        "task": "klique.whatif.fail_stale_runs",
        "schedule": 60,
        "options": {"queue": "sweep", "expires": 60},
    },
    "quota-advisor": {  # proposes for last month once (docs/whatif.md, "Quota advisor")
        "task": "klique.whatif.propose_quotas",
        "schedule": 3600,
        "options": {"queue": "sweep", "expires": 3600},
    },
    "ledger-rollup": {
        "task": "klique.ledger.rollup",
        "schedule": LEDGER_ROLLUP_INTERVAL_S,
        "options": {"expires": LEDGER_ROLLUP_INTERVAL_S},
    },
}

# Hardening (docs/deploy.md): which environment this is, the cache all web processes share, the
# login limits, the API throttles, the Content-Security-Policy and the readiness probe.
KLIQUE_ENV = "development"

# Login limits and throttles count in this cache, so with several web processes it must be Redis.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "klique",
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# Development's one runserver process answers every login, so its memory is the shared cache;
# production (settings.production) never runs on a per-process cache and keeps the check.
SILENCED_SYSTEM_CHECKS = [] if REDIS_URL else ["axes.W001"]

# django-axes locks a (username, client IP) pair after LOGIN_FAILURE_LIMIT failed logins, on the
# admin's login and the portal's alike, for LOGIN_LOCKOUT_MINUTES. allauth's own failed-login limit
# is keyed by the login alone (anyone could lock a person out from anywhere), so it is off; its
# per-address limit on login attempts stays. Both read the client address from
# apps.portal.auth.client_address: behind TRUSTED_PROXY_COUNT proxies from X-Forwarded-For; with
# none it is the peer's address, so a client cannot choose its own.
LOGIN_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "10"))
LOGIN_LOCKOUT_MINUTES = float(os.environ.get("LOGIN_LOCKOUT_MINUTES", "15"))
TRUSTED_PROXY_COUNT = int(os.environ.get("TRUSTED_PROXY_COUNT", "0"))
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = LOGIN_LOCKOUT_MINUTES / 60
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_USERNAME_CALLABLE = "apps.portal.auth.login_name"
AXES_LOCKOUT_CALLABLE = "apps.portal.auth.locked_out"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AXES_CLIENT_IP_CALLABLE = "apps.portal.auth.client_address"
ACCOUNT_RATE_LIMITS = {"login_failed": None}

# API throttles (apps/core/throttles.py), counted per caller: per worker on the worker endpoints,
# per enrolment token on enrolment, per person on personal token creation.
THROTTLE_RATES = {
    "worker": os.environ.get("THROTTLE_WORKER", "600/min"),
    "heartbeat": os.environ.get("THROTTLE_HEARTBEAT", "120/min"),
    "wait": os.environ.get("THROTTLE_WAIT", "600/min"),
    "sync": os.environ.get("THROTTLE_SYNC", "600/min"),
    "enrol": os.environ.get("THROTTLE_ENROL", "300/min"),
    "token": os.environ.get("THROTTLE_TOKEN", "30/hour"),
}

# Content-Security-Policy (django-csp): scripts and styles only from this site, no inline script.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
        # The login buttons' forms redirect to the identity providers' login pages.
        "form-action": ["'self'", *SSO_ORIGINS],
    }
}

# /readyz fails when the engine's last pass is older than this (0: not checked).
READY_MAX_PASS_AGE_S = float(os.environ.get("READY_MAX_PASS_AGE_S", "60"))

# Webhooks (docs/governance.md): https only, except plain http to these hosts (development, tests);
# attempts per delivery, each one's timeout, and the exponential backoff between them. Without a
# broker (no REDIS_URL) deliveries are sent in the process that committed them.
WEBHOOK_HTTP_HOSTS = env_list("WEBHOOK_HTTP_HOSTS", ["127.0.0.1", "localhost"])
WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("WEBHOOK_MAX_ATTEMPTS", "5"))
WEBHOOK_TIMEOUT_S = float(os.environ.get("WEBHOOK_TIMEOUT_S", "5"))
WEBHOOK_RETRY_BACKOFF_S = int(os.environ.get("WEBHOOK_RETRY_BACKOFF_S", "10"))
WEBHOOK_RETRY_BACKOFF_MAX_S = int(os.environ.get("WEBHOOK_RETRY_BACKOFF_MAX_S", "600"))
WEBHOOK_SEND_INLINE = env_bool("WEBHOOK_SEND_INLINE", not REDIS_URL)
# What-if runs (docs/whatif.md): a Celery job on queue "whatif", or a thread of the web process
# without a broker; the longest period; a running job silent this long is marked failed.
WHATIF_INLINE = env_bool("WHATIF_INLINE", not REDIS_URL)
WHATIF_MAX_DAYS = int(os.environ.get("WHATIF_MAX_DAYS", "62"))
WHATIF_STALE_S = int(os.environ.get("WHATIF_STALE_S", "900"))
