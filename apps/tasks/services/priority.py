"""A submitted task's priority: the one owner of the rule every way in applies (the API, bulk,
schedules at each due time, the portal, and the CLI, SDK and MCP through the API).

A task asks for a whole number, the name of a priority class IT named in the admin (any case), or
nothing. Nothing takes the compute resource's default priority, else its profile's. What is asked
may not exceed the maximum: the compute resource's, else its profile's; neither set means no cap.
The default is not capped: IT set both."""

from django.core.exceptions import ValidationError

from apps.policies.models import ComputeResource, PriorityClass

# What the database stores (a 32-bit integer): a number outside it is refused, never a 500.
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
NAME_MAX_CHARS = 40  # PriorityClass.name


def default_priority(resource: ComputeResource) -> int:
    if resource.default_priority is not None:
        return resource.default_priority
    return resource.profile.default_priority


def max_priority(resource: ComputeResource) -> int | None:
    if resource.max_priority is not None:
        return resource.max_priority
    return resource.profile.max_priority


def _classes() -> list[PriorityClass]:
    return list(PriorityClass.objects.order_by("value"))


def known_classes(classes: list[PriorityClass] | None = None) -> str:
    classes = _classes() if classes is None else classes
    return ", ".join(f"{c.name} ({c.value})" for c in classes) or "none"


def _refuse(message: str):
    raise ValidationError({"priority": message})


def _named(name: str) -> int:
    wanted = name.strip().lower()
    classes = _classes()
    for found in classes:
        if found.name.lower() == wanted:
            return found.value
    _refuse(
        f"Unknown priority class {name[:NAME_MAX_CHARS]!r}; the classes are {known_classes(classes)}, "
        "or give a whole number."
    )


def _number(asked) -> int:
    if isinstance(asked, bool) or not isinstance(asked, int):
        _refuse("Give a whole number or the name of a priority class.")
    if not PRIORITY_MIN <= asked <= PRIORITY_MAX:
        _refuse(f"A priority is a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}.")
    return asked


def resolve_priority(compute_resource: ComputeResource, asked) -> int:
    """The priority a task submitted to ``compute_resource`` gets, asking for ``asked`` (None, a
    whole number or a priority class's name); a ValidationError on field ``priority`` when a user
    may not ask for it there."""
    if asked is None:
        return default_priority(compute_resource)
    value = _named(asked) if isinstance(asked, str) else _number(asked)
    cap = max_priority(compute_resource)
    if cap is not None and value > cap:
        named = PriorityClass.objects.filter(value=cap).values_list("name", flat=True).first()
        _refuse(
            f"Priority {value} is above the maximum: at most {cap}"
            f"{f' ({named})' if named else ''} on {compute_resource}."
        )
    return value
