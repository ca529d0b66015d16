"""gunicorn's own logs (its error log and the access log) as JSON lines, like the rest of the
control plane, when ``LOG_FORMAT`` is ``json`` (or unset under ``klique.settings.production``):

    gunicorn --config python:klique.gunicorn_conf klique.wsgi:application ...

With ``LOG_FORMAT=text`` gunicorn keeps its own format. Both logs go to standard error and
standard output (as ``--error-logfile -`` and ``--access-logfile -`` would); docs/operations.md.
"""

import os

_production = os.environ.get("DJANGO_SETTINGS_MODULE", "").endswith(".production")
_format = os.environ.get("LOG_FORMAT") or ("json" if _production else "text")

accesslog = "-"
errorlog = "-"
if _format == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": "klique.jsonlog.JsonFormatter"},
            "access": {"()": "klique.jsonlog.AccessJsonFormatter"},
        },
        "handlers": {
            "error": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
            "access": {"class": "logging.StreamHandler", "formatter": "access", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["access"], "propagate": False},
        },
        "root": {"level": "INFO", "handlers": []},
    }
