"""SQLite rebuilds ``policies_budgetwindow`` (policies 0012: money windows) and
``policies_resourcepolicy`` (policies 0013: ``credit_lost_work``), which drops their change
triggers: install them again."""

from django.db import migrations

from apps.engine import changes


def install(apps, schema_editor):
    changes.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("engine", "0009_reinstall_change_triggers"),
        ("policies", "0013_credit_lost_work"),
        ("tasks", "0015_task_checkpoint_and_lost_work"),
        ("whatif", "0002_advisor_proposal"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
