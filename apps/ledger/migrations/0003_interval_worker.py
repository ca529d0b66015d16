"""Each usage interval names the worker that claimed its task; existing intervals take it from the
task's claim events (the latest claim inside the interval)."""

import django.db.models.deletion
from django.db import migrations, models

BATCH = 2000


def from_claims(apps, schema_editor):
    TaskEvent = apps.get_model("tasks", "TaskEvent")
    UsageInterval = apps.get_model("ledger", "UsageInterval")
    Worker = apps.get_model("pools", "Worker")
    workers = set(Worker.objects.values_list("pk", flat=True))
    claims = {}
    events = TaskEvent.objects.filter(kind="claimed").order_by("task_id", "at", "pk")
    for task_id, at, detail in events.values_list("task_id", "at", "detail").iterator(chunk_size=BATCH):
        worker_id = (detail or {}).get("worker_id")
        if worker_id in workers:
            claims.setdefault(task_id, []).append((at, worker_id))
    changed = []
    intervals = UsageInterval.objects.filter(task_id__in=list(claims), worker__isnull=True)
    for interval in intervals.only("pk", "task_id", "start", "end").iterator(chunk_size=BATCH):
        inside = [
            worker_id
            for at, worker_id in claims[interval.task_id]
            if interval.start <= at and (interval.end is None or at <= interval.end)
        ]
        if inside:
            interval.worker_id = inside[-1]
            changed.append(interval)
    UsageInterval.objects.bulk_update(changed, ["worker"], batch_size=BATCH)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0002_rollups"),
        ("pools", "0005_pool_claim_timeout"),
        ("tasks", "0007_task_slots"),
    ]

    operations = [
        migrations.AddField(
            model_name="usageinterval",
            name="worker",
            field=models.ForeignKey(
                blank=True,
                help_text="The worker that claimed the task in this interval; empty until a worker "
                "claims it.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="pools.worker",
            ),
        ),
        migrations.RunPython(from_claims, migrations.RunPython.noop),
    ]
