"""Preemption notifications written before the fix link to ``/tasks/<id>/``, a page that does not
exist; the task's page is ``/work/tasks/<id>/``."""

from django.db import migrations
from django.db.models import F, Value
from django.db.models.functions import Concat


def forwards(apps, schema_editor):
    Notification = apps.get_model("accounts", "Notification")
    Notification.objects.filter(link__startswith="/tasks/").update(link=Concat(Value("/work"), F("link")))


class Migration(migrations.Migration):
    dependencies = [("accounts", "0003_project_priority")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
