"""The Celery app: Redis as broker; tasks are discovered in each app's ``tasks.py`` (and the quota
advisor's in ``apps/whatif/advisor_tasks.py``)."""

import os

from celery import Celery

from klique.liveness import Alive

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "klique.settings.base")

app = Celery("klique")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["apps.whatif"], related_name="advisor_tasks")
app.steps["worker"].add(Alive)
