from django.apps import AppConfig


class ScimConfig(AppConfig):
    name = "apps.scim"
    label = "scim"
    verbose_name = "SCIM provisioning"
