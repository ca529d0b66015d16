"""The portal's what-if form (docs/whatif.md, "The what-if page"): the period (or a preset), the
scope, the wait threshold, a title, and IT's changes as rows of "what / of which / value" with an
advanced JSON box for the rest. The form only gathers a ``RunRequest``; ``services.start_run``
checks it in full, and its ``RunError`` is put back on the field it names."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django import forms
from django.forms import formset_factory

from apps.accounts.models import Group
from apps.core import parsers
from apps.engine.core.snapshot import LENDING
from apps.engine.core.whatif_changes import AMOUNT_MAX, CHANGE_KINDS
from apps.policies.models import Profile
from apps.pools.models import Pool
from apps.whatif.services import WAIT_THRESHOLD_MAX_S, RunError, RunRequest

KINDS = [
    ("", "—"),
    ("reservations", "Reservation (GPUs)"),
    ("limits", "Limit (GPUs)"),
    ("budgets", "Budget hours"),
    ("time_weights", "Time weight"),
    ("pool_order", "Pool order"),
    ("capacities", "Pool capacity (GPUs)"),
    ("lending", "Lending to children (priority or fair)"),
    ("over_quota_weights", "Over-quota weight"),
]
# change kind -> what its target is
TARGET_OF = {
    "reservations": "group",
    "limits": "group",
    "budgets": "group",
    "time_weights": "profile",
    "pool_order": "profile",
    "capacities": "pool",
    "lending": "group",
    "over_quota_weights": "group",
}
PERIODS = [("", "—"), ("day", "day"), ("week", "week"), ("month", "month")]
PRESETS = [
    ("", "the dates below"),
    ("24h", "last 24 hours"),
    ("yesterday", "yesterday"),
    ("7d", "last 7 days"),
    ("30d", "last 30 days"),
    ("month", "last month"),
]
DATETIME = "%Y-%m-%dT%H:%M"


def preset_period(preset: str, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of a preset, in UTC. Whole days and months start at 00:00 UTC, where the budget
    windows start, so their budget hours are counted from the period's start (docs/whatif.md)."""
    now = now.astimezone(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if preset == "24h":
        end = now.replace(second=0, microsecond=0)
        return end - timedelta(days=1), end
    if preset == "yesterday":
        return today - timedelta(days=1), today
    if preset == "7d":
        return today - timedelta(days=7), today
    if preset == "30d":
        return today - timedelta(days=30), today
    if preset == "month":
        first = today.replace(day=1)
        return (first - timedelta(days=1)).replace(day=1), first
    raise ValueError(preset)


def presets(now: datetime) -> dict[str, list[str]]:
    """Each preset's start and end as the date-time inputs take them (for the page's script)."""
    return {
        key: [moment.strftime(DATETIME) for moment in preset_period(key, now)] for key, _ in PRESETS if key
    }


def targets() -> list:
    """The live estate's groups with a resource policy, profiles and pools, grouped for a select.
    Values are ``group:SLUG``, ``profile:NAME``, ``pool:NAME``."""
    groups = Group.objects.filter(policy__isnull=False).order_by("name")
    return [
        ("", "—"),
        ("Groups", [(f"group:{g.slug}", g.name) for g in groups]),
        (
            "Profiles",
            [
                (f"profile:{name}", name)
                for name in Profile.objects.order_by("name").values_list("name", flat=True)
            ],
        ),
        (
            "Pools",
            [(f"pool:{name}", name) for name in Pool.objects.order_by("name").values_list("name", flat=True)],
        ),
    ]


def _plain(d: Decimal) -> int | float:
    return int(d) if d == d.to_integral_value() else float(d)


class ChangeForm(forms.Form):
    """One change: what (``kind``), of which group, profile or pool (``target``), the new value,
    and for budget hours the window's period. A row left blank is no change."""

    kind = forms.ChoiceField(choices=KINDS, required=False, label="Change")
    target = forms.ChoiceField(choices=(), required=False, label="Of")
    value = forms.CharField(
        required=False,
        max_length=500,
        label="To",
        help_text="GPUs, hours or a weight; for a pool order the pools in order, separated by commas; "
        "for lending priority or fair",
    )
    period = forms.ChoiceField(choices=PERIODS, required=False, label="Budget period")

    def __init__(self, *args, targets=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = targets

    def clean(self):
        data = super().clean()
        kind, target, text = data.get("kind"), data.get("target"), (data.get("value") or "").strip()
        if not kind:
            if target or text:
                self.add_error("kind", "choose what to change")
            return data
        if not target:
            self.add_error("target", "required")
            return data
        what, _, name = target.partition(":")
        if what != TARGET_OF[kind]:
            self.add_error(
                "target", f"a {dict(KINDS)[kind].split(' (')[0].lower()} is set on a {TARGET_OF[kind]}"
            )
            return data
        value = self._value(kind, text, data.get("period"))
        if not (self.has_error("value") or self.has_error("period")):
            data["change"] = (kind, name, value)
        return data

    def _value(self, kind: str, text: str, period: str):
        if kind == "pool_order":
            pools = [p.strip() for p in text.split(",") if p.strip()]
            if not pools:
                self.add_error("value", "the profile's pools in the new order, separated by commas")
                return None
            return pools
        if kind == "budgets" and not text:
            return None  # no budget
        if kind == "lending":
            if text not in LENDING:
                self.add_error("value", 'must be "priority" or "fair"')
                return None
            return text
        try:
            number = Decimal(text)
        except InvalidOperation:
            self.add_error("value", "must be a number" if text else "required")
            return None
        if not number.is_finite():
            self.add_error("value", "must be a number")
            return None
        if number.adjusted() >= 12:
            self.add_error("value", f"must be below {AMOUNT_MAX:,}")
            return None
        if kind == "budgets":
            if not period:
                self.add_error("period", "required with budget hours")
                return None
            return {"hours": _plain(number), "period": period}
        return _plain(number)


MAX_CHANGE_ROWS = 50
ChangeFormSet = formset_factory(
    ChangeForm, extra=3, max_num=MAX_CHANGE_ROWS, absolute_max=MAX_CHANGE_ROWS, validate_max=True
)


class RunForm(forms.Form):
    """A what-if run's period, scope, threshold, title and advanced JSON changes."""

    preset = forms.ChoiceField(choices=PRESETS, required=False, label="Period")
    start = forms.DateTimeField(
        required=False,
        label="From (UTC)",
        input_formats=[DATETIME, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=DATETIME),
    )
    end = forms.DateTimeField(
        required=False,
        label="To (UTC)",
        input_formats=[DATETIME, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=DATETIME),
        help_text="Exclusive. Only recorded demand: not later than now.",
    )
    groups = forms.ModelMultipleChoiceField(
        queryset=Group.objects.filter(policy__isnull=False).order_by("name"),
        to_field_name="slug",
        required=False,
        label="Groups",
        help_text="These groups and every group below them; none ticked: the whole estate.",
        widget=forms.CheckboxSelectMultiple,
    )
    wait_threshold_s = forms.IntegerField(
        min_value=0,
        max_value=WAIT_THRESHOLD_MAX_S,
        initial=3600,
        label="Wait threshold (s)",
        help_text="Tasks that wait longer than this are counted per group.",
    )
    title = forms.CharField(max_length=200, required=False)
    changes_json = forms.CharField(
        required=False,
        label="Advanced: changes as JSON",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text='Added to the rows above, e.g. {"budgets": {"nlp": [{"hours": 8, "period": "day"}]}} '
        "(docs/whatif.md).",
    )

    def __init__(self, *args, now: datetime, **kwargs):
        super().__init__(*args, **kwargs)
        self.now = now

    def clean(self):
        data = super().clean()
        preset = data.get("preset")
        if preset:
            data["start"], data["end"] = preset_period(preset, self.now)
        else:
            for field in ("start", "end"):
                if data.get(field) is None and field not in self.errors:
                    self.add_error(field, "required, or choose a preset period")
        for field in ("start", "end"):
            if data.get(field) is not None:
                data[field] = data[field].replace(tzinfo=UTC) if data[field].tzinfo is None else data[field]
        return data

    def clean_changes_json(self):
        text = self.cleaned_data["changes_json"].strip()
        if not text:
            return {}
        try:
            changes = parsers.loads(text)
        except parsers.JSONInputError as e:
            raise forms.ValidationError(str(e)) from None
        except json.JSONDecodeError as e:
            raise forms.ValidationError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        if not isinstance(changes, dict):
            raise forms.ValidationError("must be an object of change kinds")
        for kind, value in changes.items():
            if kind not in CHANGE_KINDS:
                raise forms.ValidationError(f"{kind}: unknown kind (one of {', '.join(CHANGE_KINDS)})")
            if not isinstance(value, dict):
                raise forms.ValidationError(f"{kind}: must be an object")
        return changes


class RunForms:
    """The run form and its change rows, checked together; ``request()`` is the ``RunRequest`` once
    both are valid and the rows and the JSON agree, and ``refused()`` puts a service's refusal on
    the field it names."""

    def __init__(self, data=None, *, now: datetime, initial: dict | None = None, rows: list | None = None):
        self.form = RunForm(data, now=now, initial=initial)
        self.rows = ChangeFormSet(data, prefix="changes", initial=rows, form_kwargs={"targets": targets()})
        self.origin: dict[tuple[str, str], object] = {}

    def request(self) -> RunRequest | None:
        valid = self.form.is_valid()
        valid = self.rows.is_valid() and valid
        if not valid:
            return None
        changes = self._changes()
        if changes is None:
            return None
        data = self.form.cleaned_data
        return RunRequest(
            start=data["start"],
            end=data["end"],
            groups=[g.slug for g in data["groups"]],
            changes=changes,
            wait_threshold_s=data["wait_threshold_s"],
            title=data["title"],
        )

    def _changes(self) -> dict | None:
        """The rows and the JSON as one changes object; None (with the error shown) when they clash."""
        changes: dict[str, dict] = {}
        budgets: dict[str, list] = {}
        for row in self.rows.forms:
            change = row.cleaned_data.get("change")
            if change is None:
                continue
            kind, name, value = change
            if kind == "budgets":
                budgets.setdefault(name, []).append((value, row))
                continue
            of_kind = changes.setdefault(kind, {})
            if name in of_kind:
                row.add_error("target", f"{name} is changed twice")
                return None
            of_kind[name] = value
            self.origin[(kind, name)] = row
        for name, entries in budgets.items():
            windows = [value for value, _ in entries]
            if None in windows and len(windows) > 1:
                entries[1][1].add_error("value", "a group left with no budget has no other budget row")
                return None
            changes.setdefault("budgets", {})[name] = (
                [] if windows == [None] else windows[0] if len(windows) == 1 else windows
            )
            self.origin[("budgets", name)] = entries[0][1]
        for kind, names in self.form.cleaned_data["changes_json"].items():
            of_kind = changes.setdefault(kind, {})
            for name, value in names.items():
                if name in of_kind:
                    self.form.add_error("changes_json", f"{kind}.{name}: also given in a row above")
                    return None
                of_kind[name] = value
                self.origin[(kind, name)] = "changes_json"
        return {kind: changes[kind] for kind in CHANGE_KINDS if changes.get(kind)}

    def refused(self, error: RunError) -> None:
        """Show the service's refusal on its field: a change's on its row or on the JSON box."""
        if error.field != "changes":
            self.form.add_error(error.field if error.field in self.form.fields else None, error.message)
            return
        for (kind, name), where in self.origin.items():
            prefix = f"{kind}.{name}"
            if error.message.startswith(prefix) and error.message[len(prefix) : len(prefix) + 1] in ":.[":
                if where == "changes_json":
                    self.form.add_error("changes_json", error.message)
                else:
                    where.add_error("value", error.message)
                return
        self.form.add_error(None, f"Changes: {error.message}")


def rows_of(changes: dict) -> tuple[list[dict], dict]:
    """A saved run's changes as the form's rows, and what the rows cannot show (a group, profile or
    pool no longer in the estate, a value of another shape) as JSON."""
    known = {value for _, options in targets()[1:] for value, _ in options}
    rows, rest = [], {}
    for kind in CHANGE_KINDS:
        for name, value in (changes.get(kind) or {}).items():
            target = f"{TARGET_OF[kind]}:{name}"
            shown = _rows(kind, target, value) if target in known else None
            if shown is None:
                rest.setdefault(kind, {})[name] = value
            else:
                rows.extend(shown)
    return rows, rest


def _rows(kind: str, target: str, value) -> list[dict] | None:
    row = {"kind": kind, "target": target}
    if kind == "pool_order":
        ok = isinstance(value, list) and all(isinstance(p, str) for p in value)
        return [row | {"value": ", ".join(value)}] if ok else None
    if kind == "budgets":
        windows = [value] if isinstance(value, dict) else value
        if not isinstance(windows, list) or not all(isinstance(w, dict) for w in windows):
            return None
        if not windows:
            return [row | {"value": ""}]
        if not all(set(w) == {"hours", "period"} for w in windows):
            return None
        return [row | {"value": str(w["hours"]), "period": w["period"]} for w in windows]
    if kind == "lending":
        return [row | {"value": value}] if value in LENDING else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return [row | {"value": str(value)}]


def initial_of(run) -> tuple[dict, list[dict]]:
    """The form's initial values and rows to run ``run`` again."""
    rows, rest = rows_of(run.changes or {})
    initial = {
        "start": run.start.astimezone(UTC).replace(tzinfo=None),
        "end": run.end.astimezone(UTC).replace(tzinfo=None),
        "groups": list(run.groups),
        "wait_threshold_s": run.wait_threshold_s,
        "title": run.title,
        "changes_json": json.dumps(rest, indent=1) if rest else "",
    }
    return initial, rows
