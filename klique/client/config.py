"""Where ``klique login`` keeps the server URL and the token: ``$KLIQUE_CONFIG``, else
``$XDG_CONFIG_HOME/klique/config.json`` (``~/.config/klique/config.json``), readable by the
user only. ``KLIQUE_URL``, ``KLIQUE_TOKEN`` and ``KLIQUE_CA_BUNDLE`` override the file, for
pipelines and agents."""

import json
import os
from pathlib import Path


def config_path() -> Path:
    if os.environ.get("KLIQUE_CONFIG"):
        return Path(os.environ["KLIQUE_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "klique" / "config.json"


def load() -> dict:
    path = config_path()
    stored = json.loads(path.read_text()) if path.exists() else {}
    url = os.environ.get("KLIQUE_URL") or stored.get("url")
    token = os.environ.get("KLIQUE_TOKEN") or stored.get("token")
    ca_bundle = os.environ.get("KLIQUE_CA_BUNDLE") or stored.get("ca_bundle")
    return {"url": url, "token": token, "ca_bundle": ca_bundle}


def save(url: str, token: str, ca_bundle: str | None = None) -> Path:
    """Store the server, the token and, when given, the CA file that checks the server."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        stored = {"url": url, "token": token}
        if ca_bundle:
            stored["ca_bundle"] = ca_bundle
        json.dump(stored, handle, indent=2)
    os.chmod(path, 0o600)
    return path
