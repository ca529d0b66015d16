"""A cloud node keeps its instance type's name and GPUs as launched; existing nodes take them from
their instance type as it is now."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def from_instance_types(apps, schema_editor):
    CloudNode = apps.get_model("cloud", "CloudNode")
    InstanceType = apps.get_model("cloud", "InstanceType")
    own = InstanceType.objects.filter(pk=OuterRef("instance_type_id"))
    CloudNode.objects.update(
        instance_type_name=Subquery(own.values("name")[:1]), gpus=Subquery(own.values("gpus")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("cloud", "0003_cloud_spend_caps"),
    ]

    operations = [
        migrations.AddField(
            model_name="cloudnode",
            name="instance_type_name",
            field=models.CharField(
                default="",
                help_text="The instance type's name as launched: the node is priced under it, whatever "
                "the type is renamed to later.",
                max_length=60,
                verbose_name="instance type name",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="cloudnode",
            name="gpus",
            field=models.PositiveIntegerField(
                default=0,
                help_text="The instance type's GPUs as launched: its usage pays its share of them.",
                verbose_name="GPUs",
            ),
            preserve_default=False,
        ),
        migrations.RunPython(from_instance_types, migrations.RunPython.noop),
    ]
