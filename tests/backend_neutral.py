"""Run each backend-neutral test once in CI.

A test that touches no database and needs no service (the pure engine core, the simulator, the
architecture checks, the client and worker code against their real counterparts) gives the same
result on SQLite as on PostgreSQL. Every run records the ones that passed in pytest's cache;
``--skip-neutral-passed`` deselects them, so the real-service run after ``make test`` (``.ci/run``)
spends its time on what PostgreSQL, Redis and the other services can change. A test that skipped,
failed or did not run in the recorded run is not deselected, nor is one marked for a service.
"""

import pytest

CACHE_KEY = "klique/neutral-passed"
_DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
}
_SERVICE_MARKERS = ("django_db", "postgres", "redis", "slurm", "browser")
_PROPERTY = "klique_backend_neutral"


def pytest_addoption(parser):
    parser.addoption(
        "--skip-neutral-passed",
        action="store_true",
        help="deselect the tests that passed without a database or service in the last run (pytest cache)",
    )


def _neutral(item) -> bool:
    if any(item.get_closest_marker(name) for name in _SERVICE_MARKERS):
        return False
    return not _DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ()))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        item.user_properties.append((_PROPERTY, _neutral(item)))
    if not config.getoption("skip_neutral_passed"):
        return
    cache = getattr(config, "cache", None)
    passed = set(cache.get(CACHE_KEY, [])) if cache is not None else set()
    keep = [item for item in items if not (item.nodeid in passed and _neutral(item))]
    dropped = [item for item in items if item.nodeid in passed and _neutral(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


_recorded: set[str] = set()


def pytest_runtest_logreport(report):
    """On the xdist controller too: the property travels with the worker's report."""
    if report.when == "call" and report.passed:
        if any(name == _PROPERTY and value for name, value in report.user_properties):
            _recorded.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput") or config.getoption("skip_neutral_passed"):
        return
    if getattr(config, "cache", None) is not None:
        config.cache.set(CACHE_KEY, sorted(_recorded))
