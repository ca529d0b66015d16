"""How large a task may be, at every way in: the API, the portal, schedules, the CLI and the SDK
(through the API), MCP (its own schema, kept equal by a test), the admin, and ``submit`` and the
schedule checks in the service layer, so nothing bypasses them (docs/channels.md, "Limits").

A worker runs a task as ``/bin/sh -c COMMAND`` with the task's ``spec.env`` in its environment, and
the OS bounds both: on Linux a single argument or variable at 128 KiB (``MAX_ARG_STRLEN``) and all
of them together at ``ARG_MAX`` (2 MiB with the usual 8 MiB stack). A command of 20,000 characters
is at most 80,000 bytes in UTF-8 and a spec of 64 KiB holds at most 64 KiB of variables, so a
task's own share stays well inside both; the rest is the worker's own environment.

The spec's shape is checked here too, since a worker reads it: an object, whose ``env``, when
given, maps environment variable names to text or numbers (a worker could not run anything else);
whose ``image``, when given, is a container image reference; and whose ``resources``, when given,
holds a Kubernetes quantity for ``cpu`` and ``memory``. Other keys are kept and ignored.

A task runs on at most ``MAX_NODES`` nodes (``Task.nodes``), each with the task's GPUs."""

import json
import re

from django.core.exceptions import ValidationError

from klique.worker.quantities import is_quantity

MAX_COMMAND_CHARS = 20_000
MAX_SPEC_BYTES = 65_536
MAX_NODES = 64
MAX_IMAGE_CHARS = 512


def spec_bytes(spec) -> int:
    """The spec's size as compact JSON in UTF-8 (lone surrogates counted as three bytes each)."""
    text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


def command_error(command: str) -> str | None:
    if len(command) > MAX_COMMAND_CHARS:
        return f"Ensure the command has at most {MAX_COMMAND_CHARS} characters (it has {len(command)})."
    return None


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


IMAGE_REFUSED = re.compile(r"[\s\x00-\x1f\x7f]")
RESOURCES = ("cpu", "memory")


def _env_error(env) -> str | None:
    if not isinstance(env, dict):
        return "spec.env must be an object of environment variables: {NAME: value}."
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            return f"spec.env: {name!r} is not a variable name (ASCII letters, digits and _, no digit first)."
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return f"spec.env.{name}: the value must be text or a number."
    return None


def _image_error(image) -> str | None:
    if not isinstance(image, str) or not image:
        return "spec.image: give a container image reference as text, e.g. ghcr.io/org/train:1.4."
    if len(image) > MAX_IMAGE_CHARS:
        return f"spec.image: at most {MAX_IMAGE_CHARS} characters (it has {len(image)})."
    if IMAGE_REFUSED.search(image):
        return "spec.image: an image reference has no spaces or control characters."
    return None


def _resources_error(resources) -> str | None:
    if not isinstance(resources, dict):
        return 'spec.resources must be an object: {"cpu": "4", "memory": "16Gi"}.'
    for name, value in resources.items():
        if name not in RESOURCES:
            return f"spec.resources: {name!r} is not one of {', '.join(RESOURCES)}."
        if not is_quantity(value):
            return (
                f"spec.resources.{name}: {value!r} is not a Kubernetes quantity "
                '(a number with an optional suffix such as m, Mi or Gi, as text: "500m", "16Gi").'
            )
    return None


def spec_shape_error(spec) -> str | None:
    """Why the spec's shape cannot be run, naming the path (``spec.resources.memory: ...``), or None."""
    if not isinstance(spec, dict):
        return "The spec must be a JSON object."
    checks = (("env", _env_error), ("image", _image_error), ("resources", _resources_error))
    for key, check in checks:
        if spec.get(key) is not None:
            error = check(spec[key])
            if error:
                return error
    return None


def nodes_error(nodes) -> str | None:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        return f"Nodes must be a whole number from 1 to {MAX_NODES}."
    return None


def validate_nodes(nodes) -> None:
    error = nodes_error(nodes)
    if error:
        raise ValidationError(error, code="max_value")


def spec_error(spec) -> str | None:
    """Why a task's spec cannot be taken (its shape, then its size), or None."""
    shape = spec_shape_error(spec)
    if shape:
        return shape
    size = spec_bytes(spec)
    if size > MAX_SPEC_BYTES:
        return f"Ensure the spec is at most {MAX_SPEC_BYTES} bytes as JSON (it is {size})."
    return None


def size_errors(command: str, spec) -> dict[str, str]:
    """The size errors of a task's command and spec, by field."""
    errors = {"command": command_error(command or ""), "spec": spec_error(spec or {})}
    return {field: error for field, error in errors.items() if error}


def validate_command_size(command: str) -> None:
    """A model field validator (the admin's forms run it)."""
    error = command_error(command)
    if error:
        raise ValidationError(error, code="max_length")


def validate_spec_size(spec) -> None:
    error = spec_error(spec)
    if error:
        raise ValidationError(error, code="max_length")
