"""The host name a daemon enrols with: an RFC 1123 host name (letters, digits and hyphens in
dot-separated labels), checked by the control plane at enrolment and by the daemon at start."""

import re

MAX_HOSTNAME_CHARS = 253
MAX_LABEL_CHARS = 63
_LABEL = re.compile(r"[A-Za-z0-9-]+", re.ASCII)
# The same rule as one regular expression, for the API's schema (its length is maxLength there).
_PATTERN_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_PATTERN = rf"^{_PATTERN_LABEL}(?:\.{_PATTERN_LABEL})*\.?$"


def hostname_error(name: str) -> str | None:
    """Why ``name`` is not an RFC 1123 host name, or None. One trailing dot (fully qualified) is
    allowed."""
    labels = (name[:-1] if name.endswith(".") else name).split(".")
    if len(name) > MAX_HOSTNAME_CHARS:
        return f"A host name has at most {MAX_HOSTNAME_CHARS} characters."
    if not name or "" in labels:
        return "A host name has no empty label (two dots in a row, or a leading dot)."
    for label in labels:
        if not _LABEL.fullmatch(label):
            return f"A host name holds only ASCII letters, digits and hyphens between dots: {label!a}."
        if len(label) > MAX_LABEL_CHARS:
            return f"Each label of a host name has at most {MAX_LABEL_CHARS} characters."
        if label.startswith("-") or label.endswith("-"):
            return f"Each label of a host name must start and end with a letter or digit: {label!a}."
    return None
