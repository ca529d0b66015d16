"""The portal shows what a profile's pools must meet: "sovereign: DE" and the GPU minimums, where
developers choose a compute resource (the work page's submit form and "Where you may submit") and
on IT's page (the queues' profiles, the pools' countries)."""

import re

import pytest

pytestmark = pytest.mark.django_db


def test_the_work_page_shows_a_sovereign_profile_where_the_developer_submits(login):
    page = login("dev-alignment").get("/work/").content.decode()
    assert re.search(r"<option value=\"\d+\">alignment/sovereign-a100-1 \(sovereign: DE\)</option>", page)
    assert re.search(r"alignment/a100-1 \(GPU memory ≥ 80 GB, GPU generation ≥ 8\)</option>", page)
    assert re.search(r">alignment/h100-8</option>", page), (
        "a profile without constraints shows its name alone"
    )
    assert 'sovereign-a100-1 <span class="badge constraint">sovereign: DE</span>' in page


def test_the_it_page_shows_pool_countries_and_profile_constraints(login):
    page = login("it").get("/it/").content.decode()
    assert 'sovereign-a100-1 <span class="badge constraint">sovereign: DE</span>' in page
    assert '<span class="badge constraint">GPU memory ≥ 80 GB</span>' in page
    assert "<th" in page and ">Country<" in page.replace("</a>", "<")
    assert re.search(r"<td[^>]*>sovereign</td>.*?<td[^>]*>DE</td>", page, re.S)


def test_the_queue_export_keeps_the_plain_profile_name(login):
    rows = login("it").get("/it/?export=csv&table=queues").content.decode().splitlines()
    row = next(line for line in rows if line.startswith("alignment/sovereign-a100-1,"))
    assert row.split(",")[2] == "sovereign-a100-1"
