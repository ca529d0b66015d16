from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "apps.tasks"
    label = "tasks"
    verbose_name = "Tasks"

    def ready(self) -> None:
        from apps.policies.models import ProfilePool
        from apps.pools.models import Pool
        from apps.tasks import checks

        Pool.extra_checks.register(checks.pool_errors)
        ProfilePool.extra_checks.register(checks.profile_pool_errors)
