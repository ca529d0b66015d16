"""IT adds a pool of another country to a sovereign profile in the admin, in headless Chromium: the
row is refused with the reason, naming the pool, its country and the profile's, and nothing is
saved."""

import pytest

from apps.policies.models import Profile
from apps.portal import demo

pytestmark = pytest.mark.browser


@pytest.fixture
def seeded(transactional_db):
    demo.seed()


def test_it_sees_the_refusal_of_a_pool_of_another_country_on_a_sovereign_profile(seeded, session):
    profile = Profile.objects.get(name="sovereign-a100-1")
    browser = session()
    browser.log_in("it")
    page = browser.open(f"/admin/policies/profile/{profile.pk}/change/")
    page.click("#pool_links-group .add-row a")
    page.click("#pool_links-1 .field-pool .select2-selection")
    page.fill(".select2-container--open .select2-search__field", "onprem")
    page.click(".select2-results__option:has-text('onprem-k8s')")
    page.click("input[name=_save]")
    page.wait_for_load_state("load")
    error = page.locator("#pool_links-group .errorlist").first.inner_text()
    assert error == (
        "Pool onprem-k8s is in NL, and profile sovereign-a100-1 is sovereign to DE: "
        "it lists only pools in DE."
    )
    assert [pool.name for pool in profile.pools.all()] == ["sovereign"]
    assert browser.errors == []
