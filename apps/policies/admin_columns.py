"""The admin lists' figures as a person reads them (``klique.numbers``): GPUs, weights and
durations, each sorted by its field."""

from django.contrib import admin

from klique import numbers


@admin.display(description="GPU size", ordering="gpus")
def gpu_size(profile) -> str:
    return numbers.gpus(profile.gpus)


@admin.display(description="time weight", ordering="time_weight")
def time_weight(profile) -> str:
    return numbers.gpus(profile.time_weight)


@admin.display(description="minimum runtime", ordering="min_runtime_s")
def min_runtime(profile) -> str:
    return numbers.duration(profile.min_runtime_s)


@admin.display(description="default time limit", ordering="default_time_limit_s")
def default_time_limit(row) -> str:
    return numbers.duration(row.default_time_limit_s)


@admin.display(description="maximum time limit", ordering="max_time_limit_s")
def max_time_limit(row) -> str:
    return numbers.duration(row.max_time_limit_s)


@admin.display(description="amount", ordering="amount")
def loan_amount(loan) -> str:
    """A loan's amount with its unit: "2 GPUs", "40 budget hours"."""
    if loan.what == loan.What.BUDGET_HOURS:
        return f"{numbers.hours(loan.amount)} budget hours"
    return numbers.plural(loan.amount, "GPU", figure=numbers.gpus)
