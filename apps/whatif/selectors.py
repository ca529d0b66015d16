"""Reads of what-if runs."""

from apps.core.exports import spreadsheet_safe
from apps.engine.core.whatif import to_csv_rows
from apps.whatif.models import WhatIfRun


def runs():
    return WhatIfRun.objects.select_related("created_by").defer("report")


def run(pk: int) -> WhatIfRun | None:
    return WhatIfRun.objects.select_related("created_by").filter(pk=pk).first()


def csv_rows(run: WhatIfRun) -> list[list[str]]:
    """A done run's comparison as CSV rows (``to_csv_rows``), safe to open in a spreadsheet."""
    return [[spreadsheet_safe(cell) for cell in row] for row in to_csv_rows(run.report)]
