"""What the API reads from a request body, and the limits that keep bad input a 400.

One JSON reader (``loads``) serves the API's parser and the forms that take JSON. It refuses:

- a body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django's, 2.5 MB by default);
- arrays and objects nested deeper than ``MAX_JSON_DEPTH``: the depth is counted over the text
  without recursion *before* parsing, since Python's decoder recurses and fails near depth 1000;
- a number out of range: one that would be infinity (``1e999``; PostgreSQL cannot store it) or
  a whole number of more than ``MAX_INT_DIGITS`` digits;
- any string, key or value, holding NUL (``\\u0000``) or a lone surrogate (``\\ud800`` to
  ``\\udfff`` unpaired): PostgreSQL's ``jsonb`` and text columns cannot store them, so they would
  fail at the database. The error names the field path (``spec.env.X``, ``gpu_stats[0]``).

The API reads JSON only (``DEFAULT_PARSER_CLASSES``): a form-encoded body is 415, as forms cannot
say which field is a number, a list or an object. Errors keep the API's shape: a parse error is
``{"detail": "..."}``, a refused string is ``{"<field>": ["..."]}``.
"""

import codecs
import json
import math
import re
from collections.abc import Collection

from django import forms
from django.conf import settings
from django.db import models
from django.forms.fields import InvalidJSONInput
from rest_framework import parsers, serializers
from rest_framework.exceptions import ParseError
from rest_framework.utils.json import strict_constant

from klique.worker.text import UNSTORABLE

MAX_JSON_DEPTH = 64
# A string ends at its closing quote or, unterminated (invalid JSON, refused anyway), at the end of
# the text: without the ``\Z`` the search restarts at every escaped quote, quadratic in the body.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# In valid JSON text, NUL and surrogates can only come from these escapes (raw control characters
# are refused by the parser, and decoding refuses raw surrogates): without one, no walk is needed.
_UNSTORABLE_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
NON_FIELD = "non_field_errors"


class JSONInputError(ValueError):
    """Input the API refuses: ``field`` is the top-level name it concerns (or ``None``)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class JSONTooDeep(JSONInputError):
    pass


def nested_deeper_than(text: str, bound: int) -> bool:
    """Whether arrays and objects nest in ``text`` more than ``bound`` deep (``{}`` is 1), counted
    over the text without recursion, outside strings; it stops at the first level past the bound."""
    if text.count("[") + text.count("{") <= bound:
        return False
    depth = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        depth += 1 if char in "[{" else -1
        if depth > bound:
            return True
    return False


def _segment(key) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    return f".{key}" if _IDENTIFIER.fullmatch(key) else f"[{json.dumps(key)}]"


def _path(path: tuple) -> str:
    text = "".join(_segment(key) for key in path)
    return text[1:] if text.startswith(".") else text or "the body"


def _what(char: str) -> str:
    if char == "\x00":
        return "a NUL character (\\u0000)"
    return f"a lone surrogate (\\u{ord(char):04x}), which is not a character"


def unstorable_string(value, cleaned: Collection[str] = ()) -> JSONInputError | None:
    """The first string (key or value) anywhere in ``value`` that holds NUL or a lone surrogate,
    as an error naming its path; ``None`` when every string can be stored. A top-level text field
    named in ``cleaned`` is let through: its serializer field cleans it (a task's log tail)."""
    stack = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str) and len(path) == 1 and path[0] in cleaned:
            continue
        if isinstance(item, str):
            found = UNSTORABLE.search(item)
            if found:
                return _refused(path, f"{_path(path)}: the value holds {_what(found.group())}.")
        elif isinstance(item, dict):
            for key, child in item.items():
                found = UNSTORABLE.search(key) if isinstance(key, str) else None
                if found:
                    return _refused(path, f"{_path(path)}: a key holds {_what(found.group())}.")
                stack.append(((*path, key), child))
        elif isinstance(item, list | tuple):
            stack.extend(((*path, index), child) for index, child in enumerate(item))
    return None


def _refused(path: tuple, message: str) -> JSONInputError:
    root = path[0] if path and isinstance(path[0], str) and not UNSTORABLE.search(path[0]) else None
    return JSONInputError(message + " Such strings cannot be stored.", root)


MAX_INT_DIGITS = 30


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent: ``1e999`` would be infinity, which no field takes
    and PostgreSQL's jsonb cannot store."""
    value = float(text)
    if not math.isfinite(value):
        raise JSONInputError(f"The number {text[:40]} is out of range.")
    return value


def _whole(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JSONInputError(f"A whole number has more than {MAX_INT_DIGITS} digits.")
    return int(text)


def loads(text: str, cleaned: Collection[str] = ()):
    """Parse JSON text within the limits above; ``JSONInputError`` (a ``ValueError``) otherwise."""
    if nested_deeper_than(text, MAX_JSON_DEPTH):
        raise JSONTooDeep(f"JSON nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects.")
    value = json.loads(text, parse_constant=strict_constant, parse_float=_finite, parse_int=_whole)
    refused = unstorable_string(value, cleaned) if _UNSTORABLE_ESCAPE.search(text) else None
    if refused:
        raise refused
    return value


def _as_api_error(error: JSONInputError) -> Exception:
    if isinstance(error, JSONTooDeep):
        return ParseError(str(error))
    return serializers.ValidationError({error.field or NON_FIELD: [str(error)]})


class JSONParser(parsers.JSONParser):
    """The API's JSON parser (``DEFAULT_PARSER_CLASSES``): ``loads`` with the body size bound. A
    view's ``cleaned_text_fields`` names the top-level text fields its serializer cleans itself."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        cleaned = getattr(parser_context.get("view"), "cleaned_text_fields", ())
        encoding = parsers.get_encoding(parser_context)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise ParseError(f"The request body is larger than {limit} bytes.")
        try:
            text = codecs.decode(raw, encoding)
        except UnicodeDecodeError as error:
            raise ParseError(f"The request body is not valid {encoding}.") from error
        try:
            return loads(text, cleaned)
        except JSONInputError as error:
            raise _as_api_error(error) from error
        except (ValueError, RecursionError) as error:
            raise ParseError(f"JSON parse error - {error}") from error


class JSONFormField(forms.JSONField):
    """A form's JSON (the admin's task spec) read with ``loads``: the same limits as the API."""

    def to_python(self, value):
        if self.disabled or value in self.empty_values or not isinstance(value, str):
            return super().to_python(value)
        try:
            return loads(value)
        except JSONInputError as error:
            raise forms.ValidationError(str(error), code="invalid") from error
        except ValueError as error:
            raise forms.ValidationError(
                self.error_messages["invalid"], code="invalid", params={"value": value}
            ) from error

    def bound_data(self, data, initial):
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return loads(data)
        except ValueError:
            return InvalidJSONInput(data)


# An admin's ``formfield_overrides`` for its JSON fields: ``PLAIN_NUMBERS | JSON_FIELDS``.
JSON_FIELDS = {models.JSONField: {"form_class": JSONFormField}}
