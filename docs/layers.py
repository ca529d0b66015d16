"""Draw the layers of pyproject.toml's import contracts (``[tool.importlinter]``) as the Mermaid
diagram in docs/architecture.md, between its ``layers:begin`` and ``layers:end`` markers.

    python docs/layers.py           print the diagram
    python docs/layers.py --write   rewrite it in docs/architecture.md

tests/architecture checks that the diagram in the docs is the one the contracts draw."""

import pathlib
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- layers:begin (python docs/layers.py --write) -->", "<!-- layers:end -->"
# The reference's names for the bands the apps stand in, bottom up (docs/architecture.md).
BANDS = {
    "foundation": ("core", "accounts", "scim"),
    "estate": ("pools", "policies"),
    "money": ("pricing", "ledger"),
    "work": ("tasks", "sessions", "workers"),
    "the cloud": ("cloud",),
    "decisions": ("engine",),
    "faces": ("governance", "webhooks", "portal", "whatif"),
}


def layers() -> list[list[str]]:
    """The layers contract's layers, top first, each a list of app names (siblings)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["id"] == "layers")
    return [[name.strip().removeprefix("apps.") for name in layer.split("|")] for layer in contract["layers"]]


def diagram() -> str:
    band_of = {app: band for band, apps in BANDS.items() for app in apps}
    lines = ["```mermaid", "flowchart TB"]
    stack = layers()
    for band in reversed(BANDS):
        members = [layer for layer in stack if band_of[layer[0]] == band]
        lines.append(f"  subgraph {band.replace(' ', '_')} [{band}]")
        lines += [f"    {' ~~~ '.join(layer)}" for layer in members]
        lines.append("  end")
    for upper, lower in zip(stack, stack[1:], strict=False):
        lines += [f"  {app} --> {lower[0]}" for app in upper]
    lines.append("```")
    return "\n".join(lines)


def block() -> str:
    return f"{BEGIN}\n{diagram()}\n{END}"


def current() -> str:
    text = DOC.read_text()
    return text[text.index(BEGIN) : text.index(END) + len(END)]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        DOC.write_text(DOC.read_text().replace(current(), block()))
    else:
        print(diagram())
