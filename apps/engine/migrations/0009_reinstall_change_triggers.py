"""SQLite rebuilds ``policies_resourcepolicy`` to add ``guarantee_start_s`` (policies 0011), which
drops its change trigger, as the other tables rebuilt this release may: install them again."""

from django.db import migrations

from apps.engine import changes


def install(apps, schema_editor):
    changes.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("engine", "0008_reinstall_change_triggers"),
        ("policies", "0011_guarantee_start"),
        ("cloud", "0005_cloud_bills"),
        ("klique_sessions", "0003_gateway"),
        ("ledger", "0008_adjustment_source"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
