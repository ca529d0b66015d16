"""A tenant admin in headless Chromium: Language's tenant admin logs in through the portal, finds
their tenant in the navigation, changes a team's policy in the admin (which lists only their
subtree), and cannot open a policy outside it."""

import pytest

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User
from apps.policies.models import PolicyChange, ResourcePolicy
from apps.portal import demo

pytestmark = pytest.mark.browser


@pytest.fixture
def tenant(transactional_db) -> User:
    demo.seed()
    user = User.objects.create_user("tenant-language", password=demo.demo_password())
    language = Group.objects.get(slug="language")
    accounts.add_membership(user=user, group=language, role=Membership.Role.TENANT_ADMIN)
    return user


def test_a_tenant_admin_changes_a_policy_in_their_subtree_and_cannot_open_one_outside(tenant, session):
    browser = session()
    page = browser.log_in("tenant-language")
    assert page.locator("nav .roles a").all_inner_texts() == ["Language", "My work"]
    page.click("nav .roles a[href='/tenants/language/']")
    page.wait_for_url(browser.server + "/tenants/language/")
    assert "Perception" not in page.content()

    page.click("text=Policies in the admin")
    page.wait_for_url("**/admin/policies/resourcepolicy/")
    rows = page.locator("#result_list tbody th a").all_inner_texts()
    assert sorted(rows) == ["Alignment", "Language", "Pretraining"]
    page.click("#result_list a:text-is('Pretraining')")
    page.fill("#id_reservation", "40")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/policies/resourcepolicy/")
    assert ResourcePolicy.objects.get(group__slug="pretraining").reservation == 40
    assert PolicyChange.objects.get(policy__group__slug="pretraining").actor == tenant

    vision = ResourcePolicy.objects.get(group__slug="vision")
    response = page.goto(f"{browser.server}/admin/policies/resourcepolicy/{vision.pk}/change/")
    assert response.status == 404
    assert "Vision" not in page.content()
    assert browser.errors == [] or all("404" in error for error in browser.errors)
