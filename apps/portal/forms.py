"""Portal forms. They check the shape of the input; the rules are the services'."""

from django import forms

from apps.accounts.models import Group, Project, User
from apps.cloud.models import CAP_KINDS
from apps.core.fields import PLAIN_INTEGER, GpuAmountFormField, PlainDecimalFormField, PlainIntegerFormField
from apps.policies.models import PriorityClass, ResourcePolicy
from apps.portal.task_runs import limits_text
from apps.tasks.limits import MAX_COMMAND_CHARS, MAX_NODES
from klique import numbers
from klique.durations import DurationError, parse_duration


def gpu_field(label: str, **kwargs) -> forms.DecimalField:
    return GpuAmountFormField(label=label, min_value=0, **kwargs)


class QuotaForm(forms.Form):
    """One team's row of the quota split."""

    reservation = gpu_field("Reservation (GPUs)")
    limit = gpu_field("Limit (GPUs)")
    budget_hours = PlainDecimalFormField(
        label="Time budget (budget hours)", max_digits=12, decimal_places=3, min_value=0, required=False
    )
    budget_period = forms.ChoiceField(
        label="Period", choices=[("", "no budget"), *ResourcePolicy.Period.choices], required=False
    )
    window_day = PlainDecimalFormField(
        label="Further budget per day (h)", max_digits=12, decimal_places=3, min_value=0, required=False
    )
    window_week = PlainDecimalFormField(
        label="Further budget per week (h)", max_digits=12, decimal_places=3, min_value=0, required=False
    )
    window_month = PlainDecimalFormField(
        label="Further budget per month (h)", max_digits=12, decimal_places=3, min_value=0, required=False
    )
    money_month = PlainDecimalFormField(
        label="Money budget per month", max_digits=12, decimal_places=4, min_value=0, required=False
    )
    money_currency = forms.CharField(label="Currency", max_length=3, required=False)
    version = PlainIntegerFormField(
        label="Version shown",
        min_value=1,
        widget=forms.HiddenInput,
        help_text="The row's version when shown.",
    )

    WINDOWS = {"window_day": "day", "window_week": "week", "window_month": "month"}

    def __init__(self, *args, policy: ResourcePolicy, **kwargs):
        from apps.policies import selectors
        from apps.policies.services import extra_budgets_of

        self.policy = policy
        initial = {
            "reservation": numbers.plain(policy.reservation),
            "limit": numbers.plain(policy.limit),
            "budget_hours": numbers.plain(policy.budget_hours),
            "budget_period": policy.budget_period,
            "version": policy.version,
        }
        extra = extra_budgets_of(policy)
        initial.update({name: numbers.plain(extra.get(period)) for name, period in self.WINDOWS.items()})
        self.money = selectors.money_windows([policy]).get(policy.pk, {})
        amount, currency = self.money.get("month", (None, ""))
        initial.update(money_month=numbers.plain(amount), money_currency=currency)
        super().__init__(*args, prefix=f"p{policy.pk}", initial=initial, **kwargs)

    def clean(self):
        """The further windows as ``extra_budgets``: {period: budget hours} of those filled in; the
        money windows as ``money_budgets``, the month's as entered (empty: none), the others kept."""
        cleaned = super().clean()
        cleaned["extra_budgets"] = {
            period: cleaned[name] for name, period in self.WINDOWS.items() if cleaned.get(name) is not None
        }
        money = {period: window for period, window in self.money.items() if period != "month"}
        if cleaned.get("money_month") is not None:
            money["month"] = (cleaned["money_month"], cleaned.get("money_currency") or "")
        cleaned["money_budgets"] = money
        return cleaned

    def named_errors(self) -> list[str]:
        """Each error with the name of the field it is about."""
        return [
            f"{self.fields[name].label if name in self.fields else 'quota'}: {error}"
            for name, errors in self.errors.items()
            for error in errors
        ]


def quota_forms(policies: list[ResourcePolicy], data=None) -> list[QuotaForm]:
    return [QuotaForm(data, policy=policy) for policy in policies]


class ResourceChoiceField(forms.ModelChoiceField):
    """A compute resource, with what its profile's pools must meet, e.g. "(sovereign: DE)"."""

    def label_from_instance(self, obj):
        constraints = obj.profile.constraints
        return f"{obj} ({', '.join(constraints)})" if constraints else str(obj)


class SubmitForm(forms.Form):
    compute_resource = ResourceChoiceField(
        queryset=None, help_text="Your group's compute resource for the GPU size."
    )
    gpus = gpu_field(
        "GPUs",
        required=False,
        help_text="Per node. Only for a profile that takes the size from the task; empty: the profile's.",
    )
    nodes = PlainIntegerFormField(
        label="Nodes",
        min_value=1,
        max_value=MAX_NODES,
        required=False,
        help_text="Nodes the task runs on, each with its GPUs; it counts GPUs x nodes. Empty: 1.",
    )
    name = forms.CharField(max_length=200, required=False)
    command = forms.CharField(
        max_length=MAX_COMMAND_CHARS,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the worker runs.",
    )
    project = forms.ModelChoiceField(queryset=None, required=False)
    priority = forms.CharField(
        max_length=40,
        required=False,
        help_text="A whole number or a priority class; higher is placed first within your group's queue. "
        "Empty: the compute resource's default.",
    )
    checkpoint = forms.BooleanField(
        required=False, help_text="The work checkpoints, so a preempted run resumes."
    )
    time_limit_s = forms.CharField(
        label="Time limit",
        max_length=40,
        required=False,
        help_text="Running time after which the work is stopped and the task ends timed out, e.g. 2h30m, "
        "90m or 3600 (seconds). Empty: the compute resource's default.",
    )
    after = forms.CharField(
        label="Runs after",
        max_length=1000,
        required=False,
        help_text="Ids of your tasks it waits for, separated by commas; if one does not succeed, this "
        "task is canceled.",
    )
    after_any = forms.BooleanField(
        label="Whatever their end",
        required=False,
        help_text="Run after them even if they fail, are canceled or time out.",
    )

    # The service's fields that this form shows under another name.
    SHOWN_AS = {"after_ok": "after", "after_any": "after"}

    def __init__(self, *args, resources, projects, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["compute_resource"].queryset = resources
        self.fields["project"].queryset = projects
        classes = ", ".join(f"{c.name} ({c.value})" for c in PriorityClass.objects.order_by("value"))
        if classes:
            self.fields["priority"].help_text += f" Classes: {classes}."
        limits = [f"{r.name}: {limits_text(r)}" for r in resources.select_related("profile").order_by("name")]
        if limits:
            self.fields["time_limit_s"].help_text += f" Default and maximum: {'; '.join(limits)}."

    def clean_time_limit_s(self) -> int | None:
        text = self.cleaned_data["time_limit_s"].strip()
        if not text:
            return None
        try:
            return parse_duration(text)
        except DurationError as error:
            raise forms.ValidationError(str(error)) from error

    def clean_after(self) -> list[int]:
        words = [word.strip() for word in self.cleaned_data["after"].replace(" ", ",").split(",")]
        words = [word for word in words if word]
        if not all(PLAIN_INTEGER.fullmatch(word) and int(word) > 0 for word in words):
            raise forms.ValidationError("Give task ids (whole numbers) separated by commas, e.g. 12, 15.")
        return [int(word) for word in words]

    def submission(self) -> dict:
        """The service's fields (``apps.tasks.services.submit``)."""
        data = dict(self.cleaned_data)
        after, whatever = data.pop("after"), data.pop("after_any")
        data["after_any" if whatever else "after_ok"] = after or None
        return data

    def field_of(self, name: str) -> str | None:
        """The field of this form that shows the service's ``name``, or None (the whole form)."""
        name = self.SHOWN_AS.get(name, name)
        return name if name in self.fields else None

    def clean_priority(self) -> int | str | None:
        """A whole number as a number, a class's name as text, empty as None (the default); the
        rule is ``resolve_priority``'s."""
        text = self.cleaned_data["priority"].strip()
        if not text:
            return None
        return int(text) if PLAIN_INTEGER.fullmatch(text) else text


class AddMemberForm(forms.Form):
    user = forms.CharField(label="Username or email", max_length=254)

    def clean_user(self) -> User:
        wanted = self.cleaned_data["user"].strip()
        found = (
            User.objects.filter(username=wanted).first() or User.objects.filter(email__iexact=wanted).first()
        )
        if found is None:
            raise forms.ValidationError(f"No one with the username or email {wanted!r}.")
        return found


class PriorityForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["priority"]
        field_classes = {"priority": PlainIntegerFormField}


class CloudCapForm(forms.Form):
    """Set the monthly cloud spend cap of the organisation or a business unit."""

    group = forms.ModelChoiceField(
        label="Scope",
        queryset=Group.objects.filter(kind__in=CAP_KINDS).order_by("kind", "name"),
        help_text="The organisation (all cloud spend) or a business unit (its groups' cloud spend).",
    )
    amount = PlainDecimalFormField(
        label="Monthly amount", max_digits=12, decimal_places=4, help_text="More than 0."
    )
    currency = forms.CharField(label="Currency", max_length=3, initial="EUR", help_text="ISO 4217, e.g. EUR.")
