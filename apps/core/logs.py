"""Log context of the control plane: the Celery task a line was written in (id and name), added to
every record in a Celery worker (the ``celery_task`` filter of ``LOGGING``)."""

import logging

from celery._state import get_current_task


class CeleryTaskFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        task = get_current_task()
        if task is not None and task.request.id and not hasattr(record, "celery_task_id"):
            record.celery_task_id = task.request.id
            record.celery_task = task.name
        return True
