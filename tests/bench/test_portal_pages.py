"""bench/portal_pages.py's smoke runs: the demo estate with a little work, and the estate at the
medium size (``seed_demo --size medium``: 200 groups, a million usage intervals), every role's pages
opened once, each a 200 within its query budget (tests/bench/test_smoke.py runs the others)."""

import pytest

from tests.bench.test_smoke import database, smoke

__all__ = ["database"]  # the fixture: a database of its own, dropped afterwards


@pytest.mark.postgres
def test_portal_pages(database):
    out = smoke("portal_pages", DATABASE_URL=database)
    assert "| cio | /leadership/ | 200 |" in out and "| dev-pretraining | /work/ | 200 |" in out


@pytest.mark.postgres
def test_portal_pages_at_the_medium_size(database):
    out = smoke("portal_pages", "--size", "medium", timeout=600, DATABASE_URL=database)
    assert "estate: 200 groups, 5000 tasks, 1000000 usage intervals" in out
    assert "| cio | /leadership/ | 200 |" in out and "| it | /it/ | 200 |" in out
