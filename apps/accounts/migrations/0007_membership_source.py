from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0006_tenant_admin_role"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="source",
            field=models.CharField(
                choices=[("klique", "Granted in Klique"), ("idp", "Identity provider")],
                default="klique",
                editable=False,
                help_text="Granted in Klique, or synced from the identity provider at each SSO login.",
                max_length=10,
            ),
        ),
    ]
