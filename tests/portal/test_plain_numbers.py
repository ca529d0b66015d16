"""The portal reads GPUs and budget hours in plain decimal notation only (apps/core/numbers.py):
``1_0`` or full-width digits are a field error, never 10 or 1."""

import pytest

from tests.portal.test_quota_split import URL, policy, split_data

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("value", ["2_0", "２０", "2e1", "+20"])
@pytest.mark.parametrize(("field", "label"), [("limit", "Limit (GPUs)"), ("budget_hours", "Time budget")])
def test_a_quota_in_loose_notation_is_refused_on_the_field(login, value, field, label):
    before = policy("alignment").limit, policy("alignment").budget_hours
    response = login("head-language").post(URL, split_data(alignment={field: value}))
    assert response.status_code == 400
    assert (
        f"Alignment, {label}" in response.content.decode() and "Enter a number." in response.content.decode()
    )
    assert (policy("alignment").limit, policy("alignment").budget_hours) == before


def test_a_quota_in_plain_notation_with_spaces_around_is_read(login):
    response = login("head-language").post(URL, split_data(alignment={"limit": " 30 "}))
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert policy("alignment").limit == 30
