"""The Grafana dashboard and the Prometheus alert rules of deploy/ (docs/operations.md) use only
metrics that a live /metrics serves; the rules pass ``promtool check rules`` and their unit tests."""

import json
import os
import re
import shutil
import subprocess
from datetime import timedelta

import pytest
import yaml
from django.utils import timezone

from apps.engine.models import PassRecord
from apps.pools.models import Pool, Worker
from apps.tasks.models import TaskEvent
from klique.settings.base import BASE_DIR
from tests.engine_live.test_meter_and_metrics import budgeted, lent_and_reclaimed, scrape  # noqa: F401
from tests.factories import WorkerFactory

DASHBOARD = BASE_DIR / "deploy/grafana/klique.json"
RULES = BASE_DIR / "deploy/prometheus/klique-rules.yaml"
RULE_TESTS = BASE_DIR / "deploy/prometheus/klique-rules.test.yaml"
METRIC = re.compile(r"\bklique_[a-z_]+\b")


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


@pytest.fixture
def estate(lent_and_reclaimed):  # noqa: F811
    """The engine's estate of the metrics tests, with an active worker daemon (last heartbeat 4 s
    ago) and a lost one on its pool, and a money budget window."""
    pool = Pool.objects.get(name="onprem")
    now = timezone.now()
    WorkerFactory(pool=pool, hostname="node-a", last_heartbeat=now - timedelta(seconds=4))
    WorkerFactory(
        pool=pool, hostname="node-b", state=Worker.State.LOST, last_heartbeat=now - timedelta(minutes=5)
    )
    WorkerFactory(pool=pool, hostname="node-c", state=Worker.State.RETIRED)
    from apps.policies.models import ResourcePolicy
    from apps.policies.money_windows import set_money_windows

    set_money_windows(ResourcePolicy.objects.order_by("pk").first(), {"month": ("100", "EUR")})
    return lent_and_reclaimed


@pytest.mark.django_db
def test_every_metric_of_the_dashboard_and_the_rules_is_served_by_metrics(client, settings, estate):
    served = {name for name, _labels in scrape(client, settings)}
    referenced = {
        name for expr in dashboard_expressions() + rule_expressions() for name in METRIC.findall(expr)
    }
    assert len(referenced) >= 12
    assert referenced - served == set()
    # the families the issue names each have a panel
    wanted = {
        "klique_engine_pass_duration_seconds_bucket",
        "klique_placements_total",
        "klique_preemptions_total",
        "klique_budget_window_hours_used",
        "klique_worker_heartbeat_age_seconds",
        "klique_workers",
    }
    on_dashboard = {name for expr in dashboard_expressions() for name in METRIC.findall(expr)}
    assert wanted <= on_dashboard


@pytest.mark.django_db
def test_the_placement_worker_and_last_pass_metrics_have_their_values(client, settings, estate):
    metrics = scrape(client, settings)
    placed = TaskEvent.objects.filter(kind=TaskEvent.Kind.PLACED).count()
    assert placed == 8 + 2  # Vision's eight, then Agents' two in the reclaim
    assert metrics[("klique_placements_total", ())] == placed
    assert metrics[("klique_workers", (("pool", "onprem"), ("state", "active")))] == 1
    assert metrics[("klique_workers", (("pool", "onprem"), ("state", "lost")))] == 1
    assert not any(key[0] == "klique_workers" and ("state", "retired") in key[1] for key in metrics)
    assert metrics[("klique_worker_heartbeat_age_seconds", (("pool", "onprem"),))] == pytest.approx(4)
    last = PassRecord.objects.filter(skipped=False).latest("started_at").started_at
    assert metrics[("klique_engine_last_pass_timestamp_seconds", ())] == pytest.approx(last.timestamp())


def test_the_dashboard_is_grafana_json_with_unique_panels_on_the_chosen_datasource():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    charts = [panel for panel in panels if panel["type"] != "row"]
    assert len(charts) >= 12 and all(panel["targets"] for panel in charts)
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in charts)
    assert dashboard["templating"]["list"][0] == dashboard["templating"]["list"][0] | {
        "name": "datasource",
        "type": "datasource",
        "query": "prometheus",
    }


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: apt-get install prometheus")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return found


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests():
    rules = yaml.safe_load(RULES.read_text())
    names = [rule["alert"] for group in rules["groups"] for rule in group["rules"]]
    for wanted in (
        "KliqueEngineStalled",
        "KliqueEnginePassSlow",
        "KliqueWorkersLost",
        "KliqueBudgetNearlyUsed",
    ):
        assert wanted in names
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    }
    assert set(names) - tested == {"KliqueEnginePassesSkippedBusy"}
    check = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0 and f"SUCCESS: {len(names)} rules found" in check.stdout, (
        check.stdout + check.stderr
    )
    test = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent, capture_output=True, text=True
    )
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr
