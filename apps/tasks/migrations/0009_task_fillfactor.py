"""Leave a fifth of each page of ``tasks_task`` free on PostgreSQL (fillfactor 80), so the engine's
rewrite of a waiting task's verdict (no indexed column changes) is a HOT update on the same page.
Pages written before keep their layout until the table is rewritten (VACUUM FULL, CLUSTER);
elsewhere nothing changes. See docs/engine.md, apply."""

from django.db import migrations

FILLFACTOR = 80


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE tasks_task SET (fillfactor = {FILLFACTOR})")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE tasks_task RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("tasks", "0008_task_kind_session")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor, elidable=False)]
