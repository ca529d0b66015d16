"""An index for the time budgets' read of a policy's intervals in the current period (issue 36:
without it, PostgreSQL intersects the whole policy index with the index on the end)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0006_entry_agent")]

    operations = [
        migrations.AddIndex(
            model_name="usageinterval",
            index=models.Index(fields=["policy", "end"], name="interval_policy_end"),
        ),
    ]
