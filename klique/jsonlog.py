"""One JSON object per log line, for the control plane (web, Celery, the engine) and the worker daemon.

Built on python-json-logger (stdlib ``logging``, no Django): every line has ``at`` (UTC, ISO 8601),
``level``, ``logger`` and ``event`` (the message), then the record's extra attributes, such as
``pass_id``, ``task_id``, ``pool_id`` or ``worker_id``. The worker daemon's ``extra={"fields": {...}}``
is flattened into the line, its ``task`` and ``worker`` named ``task_id`` and ``worker_id`` as on the
control plane. ``context`` (a dict the owner may fill later, e.g. once the daemon has enrolled) goes on
every line.
"""

import logging
import time

from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter

# The worker daemon's field names -> the names the control plane's lines use for the same ids.
FIELD_NAMES = {"task": "task_id", "worker": "worker_id"}


class JsonFormatter(_LibraryJsonFormatter):
    def __init__(self, *args, context: dict | None = None, **kwargs):
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(*args, **kwargs)
        self.context = context if context is not None else {}

    def add_fields(self, log_data: dict, record: logging.LogRecord, message_dict: dict) -> None:
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        log_data["at"] = f"{seconds}.{int(record.created % 1 * 1000):03d}Z"
        log_data["level"] = record.levelname.lower()
        log_data["logger"] = record.name
        log_data["event"] = record.getMessage()
        log_data.update(self.context)
        super().add_fields(log_data, record, message_dict)
        log_data.pop("message", None)
        for key, value in (log_data.pop("fields", None) or {}).items():
            log_data[FIELD_NAMES.get(key, key)] = value


class AccessJsonFormatter(JsonFormatter):
    """gunicorn's access log (``gunicorn.access``) as JSON: the request's fields from gunicorn's
    atoms (the record's ``args``) beside the formatted line. Used by ``klique/gunicorn_conf.py``."""

    ATOMS = {"h": "remote", "m": "method", "U": "path", "q": "query", "H": "protocol", "a": "user_agent"}

    def add_fields(self, log_data: dict, record: logging.LogRecord, message_dict: dict) -> None:
        super().add_fields(log_data, record, message_dict)
        atoms = record.args if isinstance(record.args, dict) else {}
        for atom, name in self.ATOMS.items():
            if atoms.get(atom) not in (None, "-", ""):
                log_data[name] = atoms[atom]
        for atom, name, unit in (("s", "status", 1), ("B", "bytes", 1), ("D", "duration_ms", 1000)):
            try:
                log_data[name] = int(atoms[atom]) / unit if unit != 1 else int(atoms[atom])
            except (KeyError, TypeError, ValueError):
                pass
        forwarded = atoms.get("{x-forwarded-for}i")
        if forwarded not in (None, "-", ""):
            log_data["forwarded_for"] = forwarded


_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}
_QUIET = {"celery_task_id", "celery_task", "server_time", "status_code"}  # repeated or in the line already
_SHOWN = (str, int, float, bool)


class TextFormatter(logging.Formatter):
    """The development and test format: the stdlib line, then the record's extra attributes as
    ``key=value`` (the ids the JSON lines carry: ``task placed task_id=12 pool_id=3``)."""

    def __init__(self, fmt: str = "%(asctime)s %(levelname)s %(name)s %(message)s", **kwargs):
        super().__init__(fmt, **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = {
            k: v
            for k, v in record.__dict__.items()
            if k not in _STANDARD
            and k not in _QUIET
            and not k.startswith("_")
            and isinstance(v, _SHOWN + (dict,))
        }
        fields = extras.pop("fields", None)
        for key, value in (fields if isinstance(fields, dict) else {}).items():
            extras[FIELD_NAMES.get(key, key)] = value
        extras = {k: v for k, v in extras.items() if isinstance(v, _SHOWN)}
        if not extras:
            return line
        first, newline, rest = line.partition("\n")  # a traceback stays below the line
        pairs = " ".join(f"{key}={value}" for key, value in extras.items())
        return f"{first} {pairs}{newline}{rest}"
