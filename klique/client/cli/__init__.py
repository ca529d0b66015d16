"""``klique``: the command line for people and scripts. Tables by default, ``--json`` for scripts.
``main`` is the console script (pyproject.toml); each resource's commands live in a module of
this package, the grammar in ``parser``.

Exit codes (scripts can rely on them):

    0  done; with --wait, the task succeeded
    1  with --wait, the task failed; or another error
    2  bad command line
    3  not logged in, or the token was refused (401)
    4  forbidden (403) or not found (404)
    5  the server refused the input (400); the reasons are printed per field
    6  the server could not be reached
    7  server error (5xx)
    8  with --wait, the task was canceled
    9  with --wait, the timeout passed before the task ended
   10  with --wait, the task ended timed_out (it reached its time limit)
  141  standard output was closed early (``klique ls | head``): quietly, as coreutils
"""

import os
import sys

from klique.client.cli.exits import EXIT_BY_ERROR, FAILED, PIPE_CLOSED
from klique.client.cli.login import cmd_login
from klique.client.cli.mcp import cmd_mcp
from klique.client.cli.parser import parser
from klique.client.sdk.client import Client
from klique.client.sdk.errors import ApiError, KliqueError


def pipe_closed() -> int:
    """The reader of standard output went away (``| head``): no traceback, and nothing more
    written there at exit (Python's own flush would complain)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return PIPE_CLOSED


def main(argv: list[str] | None = None) -> int:
    """Everything after the first ``--`` is the task's command, passed on untouched."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = parser().parse_args(argv)
    args.command = command
    try:
        if args.handler in (cmd_login, cmd_mcp):
            code = args.handler(args)
        else:
            with Client.from_config(channel="cli", ca_bundle=args.ca_bundle) as client:
                code = args.handler(args, client)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except BrokenPipeError:
        return pipe_closed()
    except KliqueError as error:
        if isinstance(error, ApiError) and error.errors:
            print("klique: the server refused the input:", file=sys.stderr)
            for field, reasons in error.errors.items():
                print(f"  {field}: {' '.join(map(str, reasons))}", file=sys.stderr)
        else:
            print(f"klique: {error}", file=sys.stderr)
        return next((code for kind, code in EXIT_BY_ERROR if isinstance(error, kind)), FAILED)
    except KeyboardInterrupt:
        return 130
