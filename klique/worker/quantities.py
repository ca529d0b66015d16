"""The Kubernetes quantity rule (``500m``, ``2``, ``4Gi``), shared by the API and the worker, no Django."""

import re
from decimal import Decimal

QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?", re.ASCII)
FACTORS = {
    None: 1,
    "m": Decimal("0.001"),
    **{suffix: 1000**power for power, suffix in enumerate("kMGTPE", start=1)},
    **{f"{suffix}i": 1024**power for power, suffix in enumerate("KMGTPE", start=1)},
}


def is_quantity(text) -> bool:
    """Whether ``text`` is a string written as a Kubernetes quantity."""
    return isinstance(text, str) and QUANTITY.fullmatch(text) is not None
