"""The database path makes the same decisions as the pure core: each scenario of the core's
library is replayed through run_pass on the database and its events compared line by line with
the simulator's.

The core's ``ancestor_limits`` scenario gives teams limits above their department's, which the
simulator allows (the ancestor's limit binds) but the portal refuses; its mirror here is
``scenarios/ancestor_limits_within_parent.json``, valid under both.

Two library scenarios model what only the simulator's clock does, so the database replay has no
mirror of them: ``cloud_burst`` (nodes booting and idling out: the live autoscaler is tested on real
nodes in tests/cloud_pools) and ``session_idle_limits`` (activity profiles: the live idle limits are
decided from daemon samples, tested in tests/sessions)."""

from pathlib import Path

import pytest

from apps.engine.core import scenario as scenarios
from apps.engine.core.simulation import Simulation
from tests.engine_live.db_scenario import DatabaseReplay

pytestmark = pytest.mark.django_db

LIBRARY = Path(__file__).parent.parent / "engine" / "scenarios"
OWN = Path(__file__).parent / "scenarios"
NOT_VALID_IN_THE_PORTAL = {"ancestor_limits"}
SIMULATOR_CLOCK_ONLY = {"cloud_burst", "session_idle_limits"}
MIRRORED = [
    "lend_then_reclaim",
    "sibling_reclaim",
    "never_below_reservation",
    "requeue_old_order",
    "first_pool_first",
    "execution_priority",
    "queuing_priority",
    "fractions",
    "size_from_task",
    "ancestor_limits_within_parent",
    "used_up",
    "start_check_low_watermark",
    "weight_zero",
    "reset_day",
    "reset_week",
    "reset_month",
    "budget_raise_lower",
    "engine_disabled",
    "changes",
    "budget_windows",
    "min_runtime",
    "never_fits",
    "ancestor_victim",
    "fair_share",
    "lendable",
    "priority_classes",
    "starvation",
    "time_limits",
    "dependencies",
    "arrays",
    "maintenance",
    "loans",
    "money_budget",
]


def simulated(sc) -> list[dict]:
    return [line for line in Simulation(sc, sc.duration_us).run() if "summary" not in line]


@pytest.mark.parametrize("name", MIRRORED)
def test_the_database_path_decides_as_the_core(name, settings):
    path = OWN / f"{name}.json" if (OWN / f"{name}.json").exists() else LIBRARY / f"{name}.json"
    sc = scenarios.loads(path.read_text())
    settings.LOW_WATERMARK_S = sc.low_watermark_s
    expected = simulated(sc)
    assert expected, "the scenario produces events"
    assert DatabaseReplay(sc).run() == expected


def test_the_library_is_mirrored_whole():
    library = {p.name.removesuffix(".json") for p in LIBRARY.glob("*.json") if ".expected" not in p.name}
    assert library - NOT_VALID_IN_THE_PORTAL - SIMULATOR_CLOCK_ONLY <= set(MIRRORED), library - set(MIRRORED)
