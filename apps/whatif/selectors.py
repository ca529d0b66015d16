"""Reads of what-if runs."""

from apps.accounts.models import Group
from apps.core.exports import spreadsheet_safe
from apps.engine.core.whatif import to_csv_rows
from apps.whatif import no_difference
from apps.whatif.models import WhatIfRun


def runs():
    return WhatIfRun.objects.select_related("created_by").defer("report")


def run(pk: int) -> WhatIfRun | None:
    return WhatIfRun.objects.select_related("created_by").filter(pk=pk).first()


def csv_rows(run: WhatIfRun) -> list[list[str]]:
    """A done run's comparison as CSV rows (``to_csv_rows``), safe to open in a spreadsheet."""
    return [[spreadsheet_safe(cell) for cell in row] for row in to_csv_rows(run.report)]


def group_names(slugs) -> dict[str, str]:
    return dict(Group.objects.filter(slug__in=list(slugs)).values_list("slug", "name"))


def no_difference_of(run: WhatIfRun) -> list[dict]:
    """The groups a done run's change made no difference to, each with why (``no_difference``)."""
    found = (run.report or {}).get("no_difference") or {}
    if not found:
        return []
    holders = {held["policy"] for held in found.values() if held.get("policy")}
    return no_difference.sentences(run.report, group_names({*found, *holders}))
