"""The index a worker's claim reads: the placed, unclaimed tasks of a pool in claim order. It
lives on the tasks table but serves only the claim (apps.pools.services.claim), so it is created
here; it is partial, so it holds only the few placements waiting for a worker."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("pools", "0002_worker_daemons"),
        ("tasks", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX task_claimable_idx ON tasks_task (pool_id, placed_at, queue_seq, id) "
            "WHERE state = 'placed' AND worker_id IS NULL",
            "DROP INDEX task_claimable_idx",
        ),
    ]
