"""Finance closes last month in headless Chromium and downloads a frozen statement: from the finance
page to the month close page, the close, then the statements page's PDF, read back with pypdf."""

from datetime import timedelta

import pytest
from django.utils import timezone
from pypdf import PdfReader

from apps.ledger.closed import month_after
from apps.ledger.models import MonthClose, UsageInterval
from apps.ledger.statement_forms import last_month
from apps.pricing.selectors import midnight

pytestmark = pytest.mark.browser


def test_finance_closes_last_month_and_downloads_its_statement(demo_estate, session):
    month = last_month()
    used = UsageInterval.objects.exclude(end=None).select_related("group").first()
    used.pk, used.start = None, midnight(month) + timedelta(days=9)
    used.end = used.start + timedelta(hours=5)
    used.save()
    group = used.group if used.group.kind in {"team", "department", "business_unit"} else used.group.parent

    browser = session()
    browser.log_in("finance")
    page = browser.open("/finance/")
    page.click("#month-close-links a:text('Close a month')")
    page.wait_for_url(browser.server + "/finance/months/")
    page.click(f"#month-{month:%Y-%m} button:text('Close')")
    page.wait_for_selector("text=is closed: its figures are frozen")
    close = MonthClose.objects.get(month=month)
    assert close.closed_by.username == "finance" and close.frozen.exists()
    assert month_after(month) <= timezone.now().date()

    page = browser.open("/reports/statements/")
    page.select_option("#id_group", group.slug)
    page.fill("#id_month", f"{month:%Y-%m}")
    with page.expect_download() as download:
        page.click("#statement-pdf")
    assert download.value.suggested_filename.startswith(f"statement-{group.slug}-{month:%Y-%m}")
    with open(download.value.path(), "rb") as pdf:
        text = " ".join("\n".join(p.extract_text() for p in PdfReader(pdf).pages).split())
    assert f"Statement: {group.name}, {month:%B %Y}" in text
    assert "Closed on" in text and "by finance" in text and "Price list used" in text
    assert browser.errors == []
