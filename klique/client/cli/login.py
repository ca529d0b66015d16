"""``klique login``: store the server URL, the personal token and the CA bundle, after checking
them with the server."""

import getpass
import sys

from klique.client import config
from klique.client.cli.exits import OK, USAGE
from klique.client.cli.output import show
from klique.client.sdk.client import Client


def cmd_login(args) -> int:
    stored = config.load()
    url = args.url or input(f"Klique URL [{stored['url'] or 'http://127.0.0.1:8000'}]: ").strip()
    url = url or stored["url"] or "http://127.0.0.1:8000"
    if not url.startswith(("http://", "https://")):
        print(f"klique login: the URL must start with http:// or https://, not {url!r}", file=sys.stderr)
        return USAGE
    token = args.token
    if token == "-" or (token is None and not sys.stdin.isatty()):
        token = sys.stdin.readline()
    elif token is None:
        token = getpass.getpass("Personal API token (create one at /account/tokens/): ")
    token = token.strip()
    ca_bundle = args.ca_bundle or stored["ca_bundle"]
    with Client(url, token, channel="cli", ca_bundle=ca_bundle) as client:
        me = client.me()
    path = config.save(url, token, ca_bundle)
    groups = ", ".join(f"{m['group']} ({m['role']})" for m in me.memberships) or "no groups yet"
    show(args, me, f"Logged in to {url} as {me.username}: {groups}.\nSaved to {path}.")
    return OK


def register(commands, command) -> None:
    login = command("login", cmd_login, "store the server URL and your personal token")
    login.add_argument("--url", help="the Klique server, e.g. https://klique.example.org")
    login.add_argument("--token", help="the token ('-' reads it from standard input); asked for if left out")
