"""Run each backend-neutral test once in CI, and the real-service run in two parts at once.

A test that touches no database and needs no service (the pure engine core, the simulator, the
architecture checks, the client and worker code against their real counterparts) gives the same
result on SQLite as on PostgreSQL. Every run records the ones that passed in pytest's cache;
``--skip-neutral-passed`` deselects them, so the real-service run after ``make test`` (``.ci/run``)
spends its time on what PostgreSQL, Redis and the other services can change. A test that skipped,
failed or did not run in the recorded run is not deselected, nor is one marked for a service.

``--services-part plain|heavy`` selects half of the suite: ``heavy`` is what starts processes,
servers or clusters or commits for real (transactional tests, a live server, a service marker,
and the browser, crash, deploy, bench and worker suites); ``plain`` is the rest, tests in a
rolled-back transaction. CI runs the two at once, each on a database of its own, so that the
plain part's CPU work fills the time the heavy part waits on its processes.
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


_HEAVY_FIXTURES = {"transactional_db", "live_server", "django_db_serialized_rollback", "kube_cluster"}
_HEAVY_MARKERS = ("redis", "slurm", "browser", "postgres", "install")
_HEAVY_FOLDERS = ("browser", "crash", "deploy", "bench", "worker")


def pytest_addoption(parser):
    parser.addoption(
        "--skip-neutral-passed",
        action="store_true",
        help="deselect the tests that passed without a database or service in the last run (pytest cache)",
    )
    parser.addoption(
        "--services-part",
        choices=("plain", "heavy"),
        help="only the tests of one part of the real-service run (see tests/backend_neutral.py)",
    )


def _heavy(item) -> bool:
    marker = item.get_closest_marker("django_db")
    if marker is not None and marker.kwargs.get("transaction"):
        return True
    if any(item.get_closest_marker(name) for name in _HEAVY_MARKERS):
        return True
    if _HEAVY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    parts = item.nodeid.split("/")
    return len(parts) > 2 and parts[0] == "tests" and parts[1] in _HEAVY_FOLDERS


def _neutral(item) -> bool:
    if any(item.get_closest_marker(name) for name in _SERVICE_MARKERS):
        return False
    return not _DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ()))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        item.user_properties.append((_PROPERTY, _neutral(item)))
    part = config.getoption("services_part")
    if part is not None:
        _deselect(config, items, lambda item: _heavy(item) != (part == "heavy"))
    if not config.getoption("skip_neutral_passed"):
        return
    cache = getattr(config, "cache", None)
    passed = set(cache.get(CACHE_KEY, [])) if cache is not None else set()
    _deselect(config, items, lambda item: item.nodeid in passed and _neutral(item))


def _deselect(config, items, drop) -> None:
    keep = [item for item in items if not drop(item)]
    dropped = [item for item in items if drop(item)]
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
    if (
        hasattr(config, "workerinput")
        or config.getoption("skip_neutral_passed")
        or config.getoption("services_part")
    ):
        return
    if getattr(config, "cache", None) is not None:
        config.cache.set(CACHE_KEY, sorted(_recorded))
