"""Task events by (kind, reason, at) in place of (kind, reason): the engine pass reads the reclaim
preemptions of the last hour for policies with a cap on preemptions per hour (issue 16), and
without ``at`` in the index that read visits every reclaim event ever recorded. The wider index
still serves the preemption counts by reason, so the table keeps one index for both."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tasks", "0009_task_fillfactor")]

    operations = [
        migrations.AddIndex(
            model_name="taskevent",
            index=models.Index(fields=["kind", "reason", "at"], name="task_event_kind_at_idx"),
        ),
        migrations.RemoveIndex(model_name="taskevent", name="task_event_kind_idx"),
    ]
