"""A task's ``priority`` as the API reads it: a JSON integer or a priority class's name. The field
checks the shape; the rule (default, maximum, known classes) is ``resolve_priority``'s, applied by
the service, whose refusal answers 400 on ``priority``."""

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from apps.tasks.services.priority import NAME_MAX_CHARS, PRIORITY_MAX, PRIORITY_MIN

PRIORITY_HELP = (
    "A whole number (higher is placed first within the policy's queue) or the name of a priority "
    "class IT named, e.g. low, normal or high (any case). Left out: the compute resource's default "
    "priority, else its profile's. At most the compute resource's maximum, else its profile's."
)
NAME_PATTERN = r"^[-a-zA-Z0-9_]+$"


class PriorityField(serializers.Field):
    default_error_messages = {
        "invalid": "Give a whole number as a JSON integer (200) or a priority class's name (high).",
        "range": f"A priority is a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}.",
        "name": f"A priority class's name is at most {NAME_MAX_CHARS} letters, digits, - and _.",
    }

    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", PRIORITY_HELP)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("invalid")
        if isinstance(data, int):
            if not PRIORITY_MIN <= data <= PRIORITY_MAX:
                self.fail("range")
            return data
        if not data or len(data) > NAME_MAX_CHARS or not data.isascii() or not _is_name(data):
            self.fail("name")
        return data

    def to_representation(self, value):
        return value


def _is_name(text: str) -> bool:
    return all(c.isalnum() or c in "-_" for c in text)


class PriorityFieldSchema(OpenApiSerializerFieldExtension):
    """A priority: an integer within what the database stores, or a class's name (a schedule keeps
    what it asks for and resolves it at each due time)."""

    target_class = PriorityField

    def map_serializer_field(self, auto_schema, direction):
        number = {"type": "integer", "minimum": PRIORITY_MIN, "maximum": PRIORITY_MAX}
        name = {"type": "string", "minLength": 1, "maxLength": NAME_MAX_CHARS, "pattern": NAME_PATTERN}
        return {"oneOf": [number, name]}
