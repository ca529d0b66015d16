"""/metrics serves, for each team whose parent lends "fair", its fair share of the borrowed GPUs
and what it borrows now, labelled by policy as the other per-policy gauges; nothing for teams
of a parent lending by queuing priority."""

import pytest

from tests.engine_live.test_meter_and_metrics import scrape
from tests.fair_estate import fair_estate

pytestmark = pytest.mark.django_db


def test_metrics_serve_each_fair_teams_share_and_borrowed_gpus(client, settings):
    fair_estate()
    metrics = scrape(client, settings)
    assert metrics[("klique_policy_fair_share_gpus", (("policy", "perception"),))] == 10
    assert metrics[("klique_policy_borrowed_gpus", (("policy", "perception"),))] == 20
    assert metrics[("klique_policy_fair_share_gpus", (("policy", "mapping"),))] == 30
    assert metrics[("klique_policy_borrowed_gpus", (("policy", "mapping"),))] == 0
    assert ("klique_policy_fair_share_gpus", (("policy", "vision"),)) not in metrics


def test_teams_of_a_parent_lending_by_queuing_priority_have_no_fair_share_gauge(client, settings):
    fair_estate(lending="priority")
    names = {name for name, _ in scrape(client, settings)}
    assert "klique_policy_fair_share_gpus" not in names and "klique_policy_borrowed_gpus" not in names
