"""A what-if that makes no difference to a group says why (docs/whatif.md, "No difference"): the rule
that held the group on the changed side, from the simulator's verdicts, in RULE_WORDS' words, on
the run's page and in the API. A budget-held group is recorded on the database and replayed."""

import json
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest

from apps.engine.core import scenario as scenarios
from apps.engine.core.whatif import compare
from apps.whatif import held, runs, services
from apps.whatif.no_difference import sentence
from tests.channels.conftest import client_for
from tests.engine_live.db_scenario import DatabaseReplay

START = datetime(2025, 1, 6, tzinfo=UTC)
END = START + timedelta(seconds=1500)
CHANGES = {"reservations": {"language": 2}}

# Language has a daily budget of 1 hour: its 3 one-GPU tasks of 1,400 s start (3 x the low watermark's
# 900 s is less than the hour), use it up at 1,200 s, are stopped and wait to the end. Reserving 2
# GPUs for it starts nothing: its budget holds it. Vision's one task runs at once, on both sides.
BUDGET_HELD = {
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 1500,
    "pass_interval_s": 60,
    "pools": [{"name": "onprem", "capacity": 8}],
    "profiles": [{"name": "gpu", "gpus": 1, "pools": ["onprem"]}],
    "policies": [
        {"name": "Language", "reservation": 0, "limit": 8, "budget": {"hours": 1, "period": "day"}},
        {"name": "Vision", "reservation": 0, "limit": 8},
    ],
    "compute_resources": [
        {"name": "language/gpu", "policy": "Language", "profile": "gpu"},
        {"name": "vision/gpu", "policy": "Vision", "profile": "gpu"},
    ],
    "events": [
        *(
            {"at": 0, "submit": {"id": f"l{i}", "resource": "language/gpu", "duration_s": 1400}}
            for i in range(3)
        ),
        {"at": 0, "submit": {"id": "v0", "resource": "vision/gpu", "duration_s": 60}},
    ],
}
HELD_WORDS = (
    "Language: no difference. Its tasks still waited on the changed side, held by “budget used up” "
    "for 100 % of their waiting time: a time or money budget of its policy or one above it is used up "
    "until the reset (the daily budget of Language: 1 hour). So the change started none of them sooner."
)


def test_held_by_budget_is_the_rule_with_the_most_waiting_task_time_on_the_changed_side():
    """The pure replay: Language's 3 tasks wait from 1,200 s to 1,500 s under budget_used_up only."""
    report = compare(BUDGET_HELD, {"reservations": {"Language": 2}})
    assert held.unchanged(report) == ["Language"]
    assert held.explain(BUDGET_HELD, {"reservations": {"Language": 2}}, report) == {
        "Language": {
            "tasks": 3,
            "rule": "budget_used_up",
            "share": 1.0,
            "policy": "Language",
            "window": "day",
            "hours": 1.0,
        }
    }


def test_no_difference_of_a_pool_change_explains_every_unchanged_group_and_a_group_that_never_waited():
    """A capacity change names no group: each group without a difference is explained; Vision's
    task never waited, so nothing is replayed for it."""
    changes = {"capacities": {"onprem": 16}}
    report = compare(BUDGET_HELD, changes)
    explained = held.explain(BUDGET_HELD, changes, report)
    assert explained["Vision"] == {"tasks": 1, "rule": None}
    assert explained["Language"]["rule"] == "budget_used_up"


def test_the_words_of_a_group_that_did_not_wait_had_no_task_or_was_held_by_a_limit():
    names = {"vision": "Vision", "nlp": "NLP"}
    assert sentence("Vision", {"tasks": 1, "rule": None}, names) == (
        "Vision: no difference. Its tasks did not wait on the changed side, so the change had nothing "
        "to start sooner."
    )
    assert sentence("Vision", {"tasks": 0}, names) == "Vision: no difference. It had no task in the period."
    limited = {"tasks": 3, "rule": "ancestor_limit", "share": 0.75, "policy": "nlp", "gpus": 1.0}
    assert sentence("Vision", limited, names) == (
        "Vision: no difference. Its tasks still waited on the changed side, held by “a group above at its "
        "limit” for 75 % of their waiting time: a group above its own holds the most GPUs its policy "
        "allows (the limit of NLP: 1 GPU). So the change started none of them sooner."
    )


class Items(HTMLParser):
    """The texts of the items of the section ``no-difference``."""

    def __init__(self):
        super().__init__()
        self.inside, self.item, self.items = False, None, []

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.inside = dict(attrs).get("id") == "no-difference"
        elif tag == "li" and self.inside:
            self.item = ""

    def handle_endtag(self, tag):
        if tag == "li" and self.item is not None:
            self.items.append(" ".join(self.item.split()))
            self.item = None

    def handle_data(self, data):
        if self.item is not None:
            self.item += data


@pytest.fixture
def budget_held(db, settings):
    sc = scenarios.parse(json.loads(json.dumps(BUDGET_HELD)))
    settings.LOW_WATERMARK_S = sc.low_watermark_s
    DatabaseReplay(sc).run()


def test_a_recorded_budget_held_group_says_why_on_the_page_and_in_the_api(budget_held, it, client):
    run = services.start_run(
        it, services.RunRequest(start=START, end=END, groups=[], changes=CHANGES, wait_threshold_s=60)
    )
    runs.execute(run.pk)
    run.refresh_from_db()
    assert (run.state, run.error) == ("done", "")
    assert run.report["no_difference"] == {
        "language": {
            "tasks": 3,
            "rule": "budget_used_up",
            "share": 1.0,
            "policy": "language",
            "window": "day",
            "hours": 1.0,
        }
    }

    client.force_login(it)
    page = client.get(f"/it/whatif/{run.pk}/")
    parser = Items()
    parser.feed(page.content.decode())
    assert parser.items == [HELD_WORDS]

    api = client_for(it).get(f"/api/v1/whatif-runs/{run.pk}/").json()
    assert api["no_difference"] == [
        {"group": "language", "name": "Language", "rule": "budget_used_up", "why": HELD_WORDS}
    ]
