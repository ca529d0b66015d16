"""The change log watches maintenance windows too (they are estate: a window changes a pool's
capacity for the engine), and SQLite rebuilds ``policies_profile`` to add
``unlimited_before_maintenance`` (policies 0010), which drops its trigger: install them again."""

from django.db import migrations

from apps.engine import changes


def install(apps, schema_editor):
    changes.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("engine", "0007_reinstall_change_triggers"),
        ("policies", "0010_maintenance_and_loans"),
        ("pools", "0010_maintenance_windows"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
