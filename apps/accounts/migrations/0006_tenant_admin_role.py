from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_session_idle_notification"),
    ]

    operations = [
        migrations.AlterField(
            model_name="membership",
            name="role",
            field=models.CharField(
                choices=[
                    ("it_admin", "IT admin"),
                    ("tenant_admin", "Tenant admin"),
                    ("leadership", "CIO / IT leadership"),
                    ("finance", "Finance"),
                    ("department_head", "Department head"),
                    ("team_lead", "Team lead"),
                    ("member", "Member"),
                ],
                default="member",
                max_length=20,
            ),
        ),
    ]
