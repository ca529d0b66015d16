import pytest

from apps.portal import demo
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_estate_page_needs_login(client):
    response = client.get("/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_estate_page_lists_the_pools_and_their_declared_capacity(client):
    demo.seed()
    client.force_login(UserFactory())
    page = client.get("/").content.decode()
    assert "hpc-slurm" in page and "280 declared GPUs" in page
