"""ISO 3166-1 alpha-2 country codes (from pycountry), for pools and sovereign profiles."""

import pycountry
from django.core.exceptions import ValidationError


def normalised(code: str | None) -> str:
    """A code as stored: stripped and upper case ('' for none)."""
    return (code or "").strip().upper()


def country_name(code: str) -> str:
    country = pycountry.countries.get(alpha_2=code) if len(code) == 2 else None
    return country.name if country else ""


def validate_country(code: str) -> None:
    """Refuse anything but an ISO 3166-1 alpha-2 code (e.g. DE, FR, US)."""
    if code and (code != normalised(code) or not country_name(code)):
        raise ValidationError(
            f"{code!r} is not an ISO 3166-1 alpha-2 country code (two capital letters, e.g. DE, FR, US).",
            code="invalid_country",
        )
