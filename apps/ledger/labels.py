"""The label columns of a report's rows: per cut, the columns that name a row (a group's name, kind,
level, path and cost centre; a project, user, GPU type or pool) and their text for each row."""

from apps.accounts.models import Project, User
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


def row_labels(dims: tuple[str, ...], keys, parents, groups) -> dict[tuple, dict[str, str]]:
    """Each row key's labels; ``keys`` hold ids in ``dims`` order, ``parents`` and ``groups`` are the
    group tree (``apps.accounts.selectors.group_tree``)."""
    ids = {dim: {key[i] for key in keys} for i, dim in enumerate(dims)}
    names: dict[str, dict] = {}
    if "project" in ids:
        names["project"] = {p.pk: str(p) for p in Project.objects.filter(pk__in=ids["project"] - {None})}
        names["project"][None] = "(no project)"
    if "user" in ids:
        names["user"] = dict(User.objects.filter(pk__in=ids["user"]).values_list("pk", "username"))
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
