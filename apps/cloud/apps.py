from django.apps import AppConfig


class CloudConfig(AppConfig):
    name = "apps.cloud"
    label = "cloud"
    verbose_name = "Cloud pools"
