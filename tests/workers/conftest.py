"""The worker fixtures of tests/pools: a pool, enrolled workers with real tokens, placed work."""

from tests.pools.conftest import enrol, enrolment, place, pool  # noqa: F401
