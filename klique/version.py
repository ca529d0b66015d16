"""The release: ``version`` in pyproject.toml is the one source, read from the installed package's
metadata (pip writes it on every install and upgrade; docs/releases.md)."""

from importlib.metadata import PackageNotFoundError, version


def release() -> str:
    """The installed Klique's version, e.g. ``0.1.0``; ``unknown`` when it was not installed."""
    try:
        return version("klique")
    except PackageNotFoundError:
        return "unknown"


VERSION = release()
