"""The one interface every cloud provider implements, its node record and its errors.

A provider is built from a pool's settings (region, image, subnet, ...; never credentials, which
come from the provider's own chain or a dict passed in and are not kept) and then launches,
describes and terminates that pool's nodes::

    provider = open_provider("ec2", {"region": "eu-west-1", "image_id": "ami-..."})
    try:
        node = provider.launch("h100-cloud", "h100-cloud-7", "p5.48xlarge", "spot", user_data)
    except SpotRefused:
        node = provider.launch("h100-cloud", "h100-cloud-7", "p5.48xlarge", "on-demand", user_data)

Each provider is one module, named in ``PROVIDERS``; a provider whose library is not installed
says which extra installs it when opened.
"""

import importlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

Market = Literal["spot", "on-demand"]
State = Literal["pending", "running", "stopping", "terminated"]
MARKETS = ("spot", "on-demand")
STATES = ("pending", "running", "stopping", "terminated")


@dataclass(frozen=True)
class Instance:
    """One node of a pool as its provider sees it. ``reason`` says why a node stopped or ended
    when the provider knows (``Server.SpotInstanceTermination``, ``exited with code 3``)."""

    instance_id: str
    node: str
    pool: str
    instance_type: str
    market: Market
    state: State
    launched_at: datetime
    address: str | None
    reason: str = ""

    @property
    def live(self) -> bool:
        """Booting or up: the node counts towards the pool's capacity."""
        return self.state in ("pending", "running")


class ProviderError(Exception):
    """The provider refused or failed; ``code`` and ``message`` are the provider's own."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


class SpotRefused(ProviderError):
    """No spot capacity, price or quota for this launch: the caller falls back to on-demand."""


class CapacityUnavailable(ProviderError):
    """An on-demand launch was refused for capacity or quota: try another type or later."""


class Provider(Protocol):
    name: str

    @classmethod
    def settings_errors(cls, settings: dict) -> dict[str, str]:
        """Field -> reason for each bad entry of a pool's provider settings (empty when good)."""
        ...

    @classmethod
    def from_settings(cls, settings: dict, credentials: dict | None = None) -> "Provider": ...

    def launch(self, pool: str, node: str, instance_type: str, market: Market, user_data: str) -> Instance:
        """Start one node named ``node`` for ``pool``; it comes back ``pending``."""
        ...

    def describe(self, pool: str) -> list[Instance]:
        """The pool's nodes (found by tag), ended ones included for a while as ``terminated``."""
        ...

    def terminate(self, instance_ids: list[str]) -> None:
        """Ask for these nodes to end; they go through ``stopping`` to ``terminated``."""
        ...


# provider: (module, class, the extra that installs what it needs)
PROVIDERS = {
    "ec2": ("klique.cloud.ec2", "EC2Provider", "cloud"),
    "local": ("klique.cloud.local", "LocalProvider", ""),
}


def provider_class(name: str) -> type[Provider]:
    """The class of a provider, a KeyError for an unknown name, or an ImportError naming the extra."""
    module, cls, extra = PROVIDERS[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as error:
        hint = f": pip install 'klique[{extra}]'" if extra else ""
        raise ImportError(f"the {name} provider needs {error.name or error}{hint}") from error


def open_provider(name: str, settings: dict[str, Any], credentials: dict | None = None) -> Provider:
    """A provider for one pool; ValueError naming each bad setting and why."""
    cls = provider_class(name)
    errors = cls.settings_errors(settings)
    if errors:
        raise ValueError("; ".join(f"{field}: {reason}" for field, reason in errors.items()))
    return cls.from_settings(settings, credentials)


def check_market(market: str) -> None:
    if market not in MARKETS:
        raise ValueError(f"market: {market!r} is not one of {', '.join(MARKETS)}")
