from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "apps.tasks"
    label = "tasks"
    verbose_name = "Tasks"

    def ready(self) -> None:
        from apps.accounts.agents import agent_stopped
        from apps.policies.models import ProfilePool
        from apps.pools.models import Pool
        from apps.scim.signals import user_deactivated
        from apps.tasks import checks, deactivation
        from apps.tasks.services.agents import on_agent_stopped

        Pool.extra_checks.register(checks.pool_errors)
        ProfilePool.extra_checks.register(checks.profile_pool_errors)
        user_deactivated.connect(deactivation.on_user_deactivated, dispatch_uid="tasks.owner_deactivated")
        agent_stopped.connect(on_agent_stopped, dispatch_uid="tasks.agents")
