"""Model validation owned elsewhere than the model's module: rules that need other models, or apps
above the model's own, register on the model's ``extra_checks`` from their ``AppConfig.ready``, and
the model's ``clean`` runs them. The models module imports none of them, so validation never closes
a circle of imports nor points a lower layer at a higher one (docs/architecture.md, "Rules that span
apps")."""

from collections.abc import Callable

from django.core.exceptions import ValidationError

Check = Callable[[object], dict]


class Checks:
    """A model's extra checks: each takes the instance being cleaned and returns
    ``{field: message or [messages]}``, empty when it passes."""

    def __init__(self) -> None:
        self._checks: list[Check] = []

    def register(self, check: Check) -> Check:
        if check not in self._checks:
            self._checks.append(check)
        return check

    def errors(self, instance) -> dict[str, list[str]]:
        merged: dict[str, list[str]] = {}
        for check in self._checks:
            for field, messages in dict(check(instance)).items():
                messages = [messages] if isinstance(messages, str) else list(messages)
                if messages:
                    merged.setdefault(field, []).extend(messages)
        return merged

    def run(self, instance) -> None:
        errors = self.errors(instance)
        if errors:
            raise ValidationError(errors)
