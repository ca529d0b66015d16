from django.apps import AppConfig


class PoliciesConfig(AppConfig):
    name = "apps.policies"
    label = "policies"
    verbose_name = "Profiles and resource policies"

    def ready(self) -> None:
        """The policies' rules validate their own models and the estate's (a pool's and a GPU type's
        fit with the profiles that list them: apps.core.checks), and a group's move under another parent."""
        from apps.accounts.models import Group
        from apps.policies import rules
        from apps.policies.models import ComputeResource, Profile, ProfilePool, ResourcePolicy
        from apps.pools.models import GpuType, Pool

        GpuType.extra_checks.register(rules.gpu_type_errors)
        Pool.extra_checks.register(rules.pool_errors)
        Profile.extra_checks.register(rules.profile_errors)
        ProfilePool.extra_checks.register(rules.profile_pool_errors)
        ResourcePolicy.extra_checks.register(rules.policy_errors)
        ComputeResource.extra_checks.register(rules.compute_resource_errors)
        if rules.group_move_errors not in Group.move_checks:
            Group.move_checks.append(rules.group_move_errors)
