"""The text log format (development and tests) and the development server's access lines:
a line names its task, pool and pass as the JSON lines do; the worker daemons' successful polls
are left out unless asked for, their failures kept (docs/operations.md, "Logs")."""

import logging

import pytest

from apps.core.logs import WorkerAccessFilter
from klique.jsonlog import TextFormatter


def line(message: str, **extra) -> str:
    record = logging.LogRecord("klique.engine.pass", logging.INFO, __file__, 1, message, (), None)
    record.__dict__.update(extra)
    return TextFormatter().format(record)


def test_a_text_line_carries_the_ids_the_json_line_carries():
    text = line("task placed", pass_id=7, task_id=12, pool_id=3)
    assert text.endswith("INFO klique.engine.pass task placed pass_id=7 task_id=12 pool_id=3")


def test_a_text_line_keeps_out_objects_and_the_celery_context_of_every_line():
    text = line("task placed", task_id=12, request=object(), celery_task_id="abc", celery_task="x")
    assert text.endswith("task placed task_id=12")
    assert line("worker", fields={"task": 5, "worker": 2}).endswith("worker task_id=5 worker_id=2")


@pytest.mark.parametrize(
    ("message", "status", "kept"),
    [
        ('"POST /api/v1/workers/sync/ HTTP/1.1" 200 12', 200, False),
        ('"POST /api/v1/workers/sync/ HTTP/1.1" 403 12', 403, True),
        ('"GET /work/ HTTP/1.1" 200 4000', 200, True),
    ],
)
def test_the_workers_successful_calls_leave_the_access_log_their_failures_stay(
    message, status, kept, monkeypatch
):
    monkeypatch.delenv("LOG_WORKER_REQUESTS", raising=False)
    record = logging.LogRecord("django.server", logging.INFO, __file__, 1, message, (), None)
    record.status_code = status
    assert WorkerAccessFilter().filter(record) is kept
    monkeypatch.setenv("LOG_WORKER_REQUESTS", "1")
    assert WorkerAccessFilter().filter(record) is True


def test_the_settings_log_text_lines_with_ids_through_the_console():
    from django.conf import settings
    from django.utils.module_loading import import_string

    from klique.settings.base import logging_config

    text = logging_config("text")
    assert text["handlers"]["console"]["formatter"] == "text"
    formatter = import_string(text["formatters"]["text"]["()"])()
    record = logging.LogRecord("klique.engine.pass", logging.WARNING, __file__, 1, "task preempted", (), None)
    record.task_id, record.reason = 4, "maintenance"
    assert formatter.format(record).endswith("task preempted task_id=4 reason=maintenance")
    assert settings.LOGGING["formatters"]["text"] == text["formatters"]["text"]
