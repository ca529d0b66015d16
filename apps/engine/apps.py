from django.apps import AppConfig


class EngineConfig(AppConfig):
    name = "apps.engine"
    label = "engine"
    verbose_name = "Engine"
