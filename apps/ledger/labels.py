"""The label columns of a report's rows: per cut, the columns that name a row (a group's name, kind,
level, path and cost centre; a project, user, GPU type or pool) and their text for each row. In a
cut by user an agent's usage also has its own row (``ViaAgent``), "<owner> via agent <name>"
(``apps.accounts.models.agent_label``), besides its owner's row, which counts it too."""

from typing import NamedTuple

from apps.accounts.models import Agent, Project, User, agent_label
from apps.accounts.selectors import cost_centres, group_path
from apps.pools.models import GpuType, Pool

LABEL_COLUMNS = {
    "group": [
        ("group", "Group"),
        ("group_kind", "Kind"),
        ("level", "Level"),
        ("group_path", "Path"),
        ("cost_centre", "Cost centre"),
    ],
    "project": [("project", "Project")],
    "user": [("user", "User")],
    "gpu_type": [("gpu_type", "GPU type")],
    "pool": [("pool", "Pool")],
}


class ViaAgent(NamedTuple):
    """The user part of the key of an agent's own row in a cut by user."""

    user: int
    agent: int


def row_labels(dims: tuple[str, ...], keys, parents, groups) -> dict[tuple, dict[str, str]]:
    """Each row key's labels; ``keys`` hold ids in ``dims`` order, ``parents`` and ``groups`` are the
    group tree (``apps.accounts.selectors.group_tree``)."""
    ids = {dim: {key[i] for key in keys} for i, dim in enumerate(dims)}
    names: dict[str, dict] = {}
    if "project" in ids:
        names["project"] = {p.pk: str(p) for p in Project.objects.filter(pk__in=ids["project"] - {None})}
        names["project"][None] = "(no project)"
    if "user" in ids:
        agents = {key for key in ids["user"] if isinstance(key, ViaAgent)}
        users = {key for key in ids["user"] if not isinstance(key, ViaAgent)}
        names["user"] = dict(User.objects.filter(pk__in=users).values_list("pk", "username"))
        if agents:
            found = Agent.objects.filter(pk__in={key.agent for key in agents})
            labels = {
                pk: agent_label(owner, name)
                for pk, owner, name in found.values_list("pk", "owner__username", "name")
            }
            names["user"].update({key: labels.get(key.agent, "") for key in agents})
    if "gpu_type" in ids:
        names["gpu_type"] = dict(GpuType.objects.filter(pk__in=ids["gpu_type"]).values_list("pk", "name"))
    if "pool" in ids:
        names["pool"] = dict(Pool.objects.filter(pk__in=ids["pool"]).values_list("pk", "name"))
    centres = cost_centres() if "group" in ids else {}
    result = {}
    for key in keys:
        labels = {}
        for i, dim in enumerate(dims):
            if dim == "group":
                group = groups[key[i]]
                labels.update(
                    group=group.name,
                    group_kind=group.get_kind_display(),
                    level=_depth(group.pk, parents),
                    group_path=group_path(group.pk, parents, groups),
                    cost_centre=centres.get(group.pk, ""),
                )
            else:
                labels[dim] = names[dim].get(key[i], "")
        result[key] = labels
    return result


def _depth(pk: int, parents: dict) -> int:
    """How far below the organisation a group is: 0 for it, 1 for a business unit, and so on."""
    depth, node, seen = 0, parents.get(pk), {pk}
    while node is not None and node not in seen:
        depth += 1
        seen.add(node)
        node = parents.get(node)
    return depth
