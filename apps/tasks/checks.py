"""What the tasks app adds to the estate's validation: a pool, or a pool's place in a profile, that
would let the engine put multi-node tasks (waiting or running) on one node is refused. Registered on
``Pool`` and ``ProfilePool`` in ``TasksConfig.ready`` (apps.core.checks)."""

from apps.tasks.selectors import multi_node_work


def pool_errors(pool) -> dict[str, str]:
    if pool.pk is None or pool.multi_node is not False:
        return {}
    profiles = multi_node_work().filter(compute_resource__profile__pools=pool)
    names = sorted(set(profiles.values_list("compute_resource__profile__name", flat=True)))
    if not names:
        return {}
    return {
        "multi_node": f"Multi-node tasks of profile {', '.join(names)} wait or run on "
        "this pool's profiles; they could land here on one node."
    }


def profile_pool_errors(link) -> dict[str, str]:
    if link.profile_id is None or link.pool_id is None or link.pool.multi_node:
        return {}
    if not multi_node_work().filter(compute_resource__profile_id=link.profile_id).exists():
        return {}
    return {
        "pool": f"Pool {link.pool} runs no multi-node work, and profile {link.profile} has multi-node "
        "tasks waiting or running; mark the pool multi-node first, or wait for those tasks."
    }
