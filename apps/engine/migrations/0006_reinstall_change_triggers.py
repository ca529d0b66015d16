"""SQLite rebuilds a table to add a column with a default (policies 0008, tasks 0012), which drops
the change log's triggers on it: create them again (``apps.engine.changes.install`` drops each
first, so PostgreSQL, whose tables keep their triggers, ends the same)."""

from django.db import migrations

from apps.engine import changes


def install(apps, schema_editor):
    changes.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("engine", "0005_pass_runner"),
        ("policies", "0008_fair_lending_and_priority"),
        ("tasks", "0012_task_priority"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
