"""SQLite rebuilds ``tasks_task`` to add the time limit, dependency and array columns (tasks 0014),
which drops the change log's triggers on it: create them again, as 0006 did."""

from django.db import migrations

from apps.engine import changes


def install(apps, schema_editor):
    changes.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("engine", "0006_reinstall_change_triggers"),
        ("policies", "0009_time_limits"),
        ("tasks", "0014_time_limits_dependencies_arrays"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
