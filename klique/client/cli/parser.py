"""The ``klique`` command line's grammar: the options every command shares and each resource's
commands, in the order ``klique --help`` lists them."""

import argparse

from klique.client.cli import (
    bills,
    estate,
    login,
    lost_work,
    mcp,
    resources,
    schedules,
    sessions,
    tasks,
    usage,
    whatif,
)


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
    ca_help = (
        "a CA file (PEM) to check the server's certificate with; `klique login` stores it "
        "[KLIQUE_CA_BUNDLE; default: SSL_CERT_FILE, else the CAs shipped with certifi]"
    )
    common.add_argument("--ca-bundle", metavar="FILE", default=argparse.SUPPRESS, help=ca_help)
    root = argparse.ArgumentParser(
        prog="klique",
        description="Ask Klique for GPUs as yourself. Start with `klique login`.",
        epilog="The task's command goes after --. Exit codes: 0 ok, 1 task failed or other error, "
        "2 usage, 3 not logged in, 4 forbidden or not found, 5 input refused, 6 unreachable, "
        "7 server error, 8 task canceled, 9 wait timed out, 10 task reached its time limit.",
    )
    root.add_argument("--ca-bundle", metavar="FILE", default=None, help=ca_help)
    commands = root.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    def command(name, handler, help_text, parent=commands, usage=None):
        sub = parent.add_parser(name, parents=[common], help=help_text, description=help_text, usage=usage)
        sub.set_defaults(handler=handler)
        return sub

    for module in (
        login,
        resources,
        tasks,
        usage,
        schedules,
        sessions,
        estate,
        mcp,
        whatif,
        bills,
        lost_work,
    ):
        module.register(commands, command)
    return root
