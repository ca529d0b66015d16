"""Leadership's split in headless Chromium: the CIO opens the split from the leadership page and
moves 10 reserved GPUs from Research to Products (Vision, in Research, first gives up 10); both
business units change in one save, each audited. A split above the organisation's reservation is
refused on the page and saves nothing."""

from decimal import Decimal

import pytest

from apps.policies import services as policies
from apps.policies.models import PolicyChange, ResourcePolicy

pytestmark = pytest.mark.browser


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def test_the_cio_moves_reserved_gpus_between_business_units(demo_estate, session):
    policies.update_policy(policy("vision"), reservation=Decimal(50))
    research, products = policy("research"), policy("products")
    browser = session()
    browser.log_in("cio")
    page = browser.open("/leadership/")
    page.click("#leadership-split")
    page.wait_for_url(browser.server + "/leadership/split/")

    page.fill(f"#id_p{products.pk}-reservation", str(products.reservation + 200))
    page.click("button:text('Save the split')")
    page.wait_for_selector(".errors")
    assert policy("products").reservation == products.reservation

    page.fill(f"#id_p{research.pk}-reservation", str(research.reservation - 10))
    page.fill(f"#id_p{products.pk}-reservation", str(products.reservation + 10))
    page.click("button:text('Save the split')")
    page.wait_for_url(browser.server + "/leadership/")
    assert policy("research").reservation == research.reservation - 10
    assert policy("products").reservation == products.reservation + 10
    audited = PolicyChange.objects.filter(policy__group__slug__in=["research", "products"])
    assert {c.policy.group.slug for c in audited} == {"research", "products"}
