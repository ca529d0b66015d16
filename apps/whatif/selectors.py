"""Reads of what-if runs."""

from apps.whatif.models import WhatIfRun


def runs():
    return WhatIfRun.objects.select_related("created_by").defer("report")


def run(pk: int) -> WhatIfRun | None:
    return WhatIfRun.objects.select_related("created_by").filter(pk=pk).first()
