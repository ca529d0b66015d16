"""Log context of the control plane: the Celery task a line was written in (id and name), added to
every record in a Celery worker (the ``celery_task`` filter of ``LOGGING``); and the development
server's access lines of the worker daemons' calls, left out unless they fail (``LOG_WORKER_REQUESTS=1``
keeps them): a daemon polls every few seconds, and a line per poll buries what matters."""

import logging
import os

from celery._state import get_current_task


class CeleryTaskFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        task = get_current_task()
        if task is not None and task.request.id and not hasattr(record, "celery_task_id"):
            record.celery_task_id = task.request.id
            record.celery_task = task.name
        return True


class WorkerAccessFilter(logging.Filter):
    """Drops ``django.server`` lines of successful calls under ``/api/v1/workers/``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if os.environ.get("LOG_WORKER_REQUESTS") == "1":
            return True
        status = getattr(record, "status_code", 500)
        return not ("/api/v1/workers/" in record.getMessage() and isinstance(status, int) and status < 400)
