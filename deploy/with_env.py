#!/usr/bin/env python3
"""Run a command with the variables of an environment file read as systemd's ``EnvironmentFile=``
reads it, so that a script, a shell and the units see the same settings.

    deploy/with_env.py /etc/klique/klique.env .venv/bin/python manage.py migrate
    deploy/with_env.py --print /etc/klique/klique.env     # the parsed variables, one per line

systemd's rules (``man systemd.exec``, EnvironmentFile=; src/basic/env-file.c): a line starting
with ``#`` or ``;`` is a comment (no comments after a value); ``KEY=VALUE`` with blanks around the
key and the value dropped; ``"..."`` keeps blanks and takes the escapes ``\\"``, ``\\\\``,
``\\$`` and ``\\```; ``'...'`` is literal; outside quotes a backslash takes the next character as
it is; a backslash at the end of a line joins the next; quotes may span lines; nothing is
expanded (``$HOME`` stays ``$HOME``); a line without ``=`` is ignored; a key that is not a
variable name is ignored with a warning here (systemd ignores it too). Only the standard library:
it runs with the system's python3 before any venv exists."""

import os
import re
import sys

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
BLANK = " \t\n\r"
DOUBLE_QUOTE_ESCAPES = '"\\`$'


def parse(text: str, warn=None) -> dict[str, str]:
    """The variables of an environment file's text, in order, as systemd reads them."""
    found: dict[str, str] = {}
    state, key, value = "pre_key", "", ""
    key_end = value_end = 0  # lengths without the trailing blanks of an unquoted part

    def push() -> None:
        name = key[:key_end]
        if NAME.match(name):
            found[name] = value[:value_end]
        elif warn is not None:
            warn(f"ignoring {name!r}: not a variable name")

    for char in text + "\n":
        if state == "pre_key":
            if char in "#;":
                state = "comment"
            elif char not in BLANK:
                state, key, key_end, value, value_end = "key", char, 1, "", 0
        elif state == "key":
            if char in "\n\r":
                state = "pre_key"  # no "=": ignored, as systemd does
            elif char == "=":
                state = "pre_value"
            else:
                key += char
                if char not in BLANK:
                    key_end = len(key)
        elif state == "pre_value":
            if char in "\n\r":
                push()
                state = "pre_key"
            elif char == "'":
                state = "single"
            elif char == '"':
                state = "double"
            elif char == "\\":
                state = "value_escape"
            elif char not in BLANK:
                state, value = "value", value + char
                value_end = len(value)
        elif state == "value":
            if char in "\n\r":
                push()
                state = "pre_key"
            elif char == "\\":
                state = "value_escape"
            else:
                value += char
                if char not in BLANK:
                    value_end = len(value)
        elif state == "value_escape":
            state = "value"
            if char not in "\n\r":
                value += char
                value_end = len(value)
        elif state == "single":
            if char == "'":
                state = "pre_value"
            else:
                value += char
                value_end = len(value)
        elif state == "double":
            if char == '"':
                state = "pre_value"
            elif char == "\\":
                state = "double_escape"
            else:
                value += char
                value_end = len(value)
        elif state == "double_escape":
            state = "double"
            if char in DOUBLE_QUOTE_ESCAPES:
                value += char
            elif char != "\n":
                value += "\\" + char
            value_end = len(value)
        elif state == "comment" and char in "\n\r":
            state = "pre_key"  # a backslash does not continue a comment (systemd 254 and later)
    if state in ("single", "double", "double_escape", "value_escape") and warn is not None:
        warn(f"unterminated value of {key[:key_end]!r} at the end of the file")
    return found


def load(path: str) -> dict[str, str]:
    """The variables of the file at ``path``; warnings go to standard error."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    return parse(text, warn=lambda message: print(f"with_env.py: {path}: {message}", file=sys.stderr))


def main(argv: list[str]) -> int:
    usage = "usage: with_env.py ENV_FILE COMMAND [ARG...]  |  with_env.py --print ENV_FILE"
    printing = argv[:1] == ["--print"]
    if printing:
        argv = argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or (not printing and len(argv) < 2) or (printing and len(argv) != 1):
        print(usage, file=sys.stderr)
        return 2
    try:
        variables = load(argv[0])
    except (OSError, UnicodeDecodeError) as error:
        print(f"with_env.py: cannot read {argv[0]}: {error}", file=sys.stderr)
        return 1
    if printing:
        for name, value in variables.items():
            print(f"{name}={value}")
        return 0
    command = argv[1:]
    if command[0] == "--":
        command = command[1:]
    try:
        os.execvpe(command[0], command, {**os.environ, **variables})
    except OSError as error:
        print(f"with_env.py: cannot run {command[0]}: {error}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
