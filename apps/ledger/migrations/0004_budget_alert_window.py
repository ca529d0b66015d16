"""Budget alerts name their time budget window: one alert per policy, window, period and kind.
Existing alerts take their policy's budget period ("" if it has none)."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Coalesce


def window_of_policy(apps, schema_editor):
    BudgetAlert = apps.get_model("ledger", "BudgetAlert")
    ResourcePolicy = apps.get_model("policies", "ResourcePolicy")
    period = ResourcePolicy.objects.filter(pk=OuterRef("policy_id")).values("budget_period")[:1]
    BudgetAlert.objects.update(period=Coalesce(Subquery(period), Value("")))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0003_interval_worker"),
        ("policies", "0006_anti_thrash_and_budget_windows"),
    ]

    operations = [
        migrations.AddField(
            model_name="budgetalert",
            name="period",
            field=models.CharField(
                blank=True,
                default="",
                help_text="The period of the time budget window alerted on (day, week or month).",
                max_length=5,
                verbose_name="budget window",
            ),
        ),
        migrations.RunPython(window_of_policy, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="budgetalert", name="one_alert_per_period"),
        migrations.AddConstraint(
            model_name="budgetalert",
            constraint=models.UniqueConstraint(
                fields=("policy", "period", "period_start", "kind"), name="one_alert_per_window_period"
            ),
        ),
    ]
