"""bench/portal_pages.py's smoke run: the demo estate with a little work, every role's pages
opened once, each a 200 within its query budget (tests/bench/test_smoke.py runs the others)."""

import pytest

from tests.bench.test_smoke import database, smoke

__all__ = ["database"]  # the fixture: a database of its own, dropped afterwards


@pytest.mark.postgres
def test_portal_pages(database):
    out = smoke("portal_pages", DATABASE_URL=database)
    assert "| cio | /leadership/ | 200 |" in out and "| dev-pretraining | /work/ | 200 |" in out
