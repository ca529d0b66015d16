"""``klique mcp``: run the MCP server (``klique.client.mcp_server``, the ``mcp`` extra) over
stdio."""

import sys

from klique.client.cli.exits import OK, USAGE


def cmd_mcp(args) -> int:
    try:
        from klique.client.mcp_server import serve
    except ImportError as error:
        print(f"klique mcp needs {error.name}: pip install 'klique[mcp]'", file=sys.stderr)
        return USAGE
    serve()
    return OK


def register(commands, command) -> None:
    command("mcp", cmd_mcp, "run the MCP server over stdio for an agent, acting with your token")
