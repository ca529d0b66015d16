"""``klique whatif`` and the SDK's ``Client.whatif`` against a live server on a real port, the run
done by the web process's thread (WHATIF_INLINE): progress, the side-by-side summary, JSON, CSV,
and bad input exiting with the CLI's code for refused input, naming the field."""

import csv
import io
import json

import pytest

from apps.accounts.models import Membership
from apps.whatif.models import WhatIfRun
from klique.client.sdk.client import Client
from klique.client.sdk.errors import InvalidRequest, PermissionDenied
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in
from tests.cloud_pools.conftest import wait_for
from tests.factories import GroupFactory, MembershipFactory, UserFactory
from tests.whatif.recorded import CHANGES, END, START, record

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
PERIOD = ["--start", "2025-01-06T00:00:00Z", "--end", "2025-01-06T00:16:40Z"]


@pytest.fixture
def estate(settings):
    record(settings)
    settings.WHATIF_INLINE = True
    org = GroupFactory(name="IT", slug="it-org", kind="organisation")
    it = MembershipFactory(group=org, role=Membership.Role.IT_ADMIN, user=UserFactory(username="ivy")).user
    member = MembershipFactory(group=org, user=UserFactory(username="vera")).user
    return it, member


@pytest.fixture
def env(live_server, estate, tmp_path):
    """A CLI logged in as the IT admin ivy, with the changes in changes.json."""
    (tmp_path / "changes.json").write_text(json.dumps(CHANGES))
    return logged_in(tmp_path, live_server.url, token_for(estate[0]))


def test_the_sdk_runs_a_what_if_and_waits_for_its_report(live_server, estate):
    seen = []
    with Client(live_server.url, token_for(estate[0])) as client:
        run = client.whatif(
            START,
            END,
            CHANGES,
            wait_threshold_s=60,
            title="Vision +2",
            poll=0.1,
            timeout=120,
            on_progress=seen.append,
        )
        assert (run.state, run.progress, run.tasks, run.created_by, run.title) == (
            "done",
            1.0,
            6,
            "ivy",
            "Vision +2",
        )
        assert run.report["base"]["groups"]["vision"]["wait_median_s"] == 90
        assert run.report["changed"]["groups"]["vision"]["wait_median_s"] == 0
        assert run.start == START and run.changes == CHANGES
        progress = [r.progress for r in seen]
        assert progress == sorted(progress) and progress[-1] == 1.0 and seen[-1].done
        rows = list(csv.reader(io.StringIO(client.whatif_csv(run.id))))
        assert ["wait_median_s", "vision", "90", "0", "-90"] in rows
        assert [r.id for r in client.whatif_runs()] == [run.id]
        assert client.whatif_runs()[0].report is None

        queued = client.whatif(
            "2025-01-06T00:00:00Z", "2025-01-06T00:16:40Z", {}, groups=["agents"], wait=False
        )
        assert queued.state in ("queued", "running", "done") and queued.groups == ["agents"]
        wait_for(lambda: client.whatif_run(queued.id).done, what="the unchanged run to finish")

        with pytest.raises(InvalidRequest) as refused:
            client.whatif("2025-01-06T00:00:00", END, CHANGES)
        assert list(refused.value.errors) == ["start"]
        with pytest.raises(InvalidRequest) as refused:
            client.whatif(START, END, {"reservations": {"nobody": 1}})
        assert refused.value.errors == {"changes": ["reservations.nobody: unknown policy"]}
    with Client(live_server.url, token_for(estate[1])) as member, pytest.raises(PermissionDenied):
        member.whatif(START, END, CHANGES)


def test_the_cli_prints_progress_then_the_summary_and_writes_the_csv(env, tmp_path):
    out = tmp_path / "whatif.csv"
    args = ["--changes", str(tmp_path / "changes.json"), "--wait-threshold", "60", "--title", "Vision +2"]
    done = klique(env, "whatif", *PERIOD, *args, "--csv", str(out), "--poll", "0.1")
    assert done.returncode == 0, done.stderr
    run = WhatIfRun.objects.get()
    progress = [line for line in done.stderr.splitlines() if line.startswith(f"what-if run {run.pk}:")]
    assert progress[0].startswith(f"what-if run {run.pk}: queued") or "running" in progress[0]
    assert progress[-1] == f"what-if run {run.pk}: done, 100 %"
    assert f"CSV of what-if run {run.pk} written to {out}." in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        f"What-if run {run.pk} (Vision +2): 2025-01-06 00:00 to 2025-01-06 00:16 UTC, 6 tasks"
    )
    assert lines[2].split() == [
        "GROUP",
        "TASKS",
        "MEDIAN",
        "WAIT",
        "P95",
        "WAIT",
        "WAITED",
        ">",
        "60",
        "S",
        "GPU-HOURS",
        "BUDGET",
        "HOURS",
    ]
    assert lines[3].split() == [
        "agents",
        "4",
        "0",
        "s",
        "->",
        "25",
        "s",
        "0",
        "s",
        "->",
        "50",
        "s",
        "0",
        "0.1",
        "0.1",
    ]
    assert lines[4].split() == [
        "vision",
        "2",
        "90",
        "s",
        "->",
        "0",
        "s",
        "90",
        "s",
        "->",
        "0",
        "s",
        "2",
        "->",
        "0",
    ] + [
        "<",
        "0.1",
        "<",
        "0.1",
    ]
    assert "onprem  13 %" in done.stdout and "Preemptions: budget 0, reclaim 0 -> 2." in done.stdout
    rows = list(csv.reader(io.StringIO(out.read_text())))
    assert rows[0] == ["metric", "name", "base", "changed", "difference"]
    assert ["wait_p95_s", "vision", "90", "0", "-90"] in rows


def test_the_cli_prints_json_and_starts_without_waiting(env, tmp_path):
    changes = str(tmp_path / "changes.json")
    done = klique(
        env, "whatif", *PERIOD, "--changes", changes, "--groups", "vision", "--json", "--poll", "0.1"
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert (run["state"], run["groups"], run["wait_threshold_s"]) == ("done", ["vision"], 3600)
    assert run["report"]["changed"]["groups"]["vision"]["wait_median_s"] == 0
    started = klique(env, "whatif", *PERIOD, "--changes", changes, "--no-wait")
    assert started.returncode == 0 and started.stdout.startswith("Started what-if run ")
    wait_for(
        lambda: not WhatIfRun.objects.exclude(state__in=["done", "failed"]).exists(), what="the runs to end"
    )


@pytest.mark.parametrize(
    "args, stdin, named",
    [
        (["--start", "2025-01-06T00:00:00", "--end", "2025-01-06T00:16:40Z"], None, "  start: Give the time"),
        (
            ["--start", "2025-01-06T00:00:00Z", "--end", "2099-01-01T00:00:00Z"],
            None,
            "  end: must not be in the",
        ),
        ([*PERIOD, "--groups", "nobody"], None, "  groups: unknown group 'nobody'"),
        ([*PERIOD], '{"reservations": {"nobody": 1}}', "  changes: reservations.nobody: unknown policy"),
        ([*PERIOD], '{"capacity": {"onprem": 8}}', "  changes: unknown kind 'capacity'"),
        ([*PERIOD], "[1, 2]", "klique whatif: --changes: - must hold a JSON object"),
        ([*PERIOD], "{not json", "klique whatif: --changes: - is not JSON"),
    ],
)
def test_bad_input_exits_5_naming_the_field(env, args, stdin, named):
    refused = klique(env, "whatif", *args, "--changes", "-", stdin=stdin or json.dumps(CHANGES))
    assert refused.returncode == 5, refused.stderr
    assert named in refused.stderr
    assert not WhatIfRun.objects.exists()


def test_usage_errors_exit_2_and_a_member_is_refused_with_4(live_server, estate, env, tmp_path):
    changes = str(tmp_path / "changes.json")
    assert klique(env, "whatif", *PERIOD).returncode == 2
    assert klique(env, "whatif", *PERIOD, "--changes", changes, "--wait-threshold", "1_0").returncode == 2
    assert klique(env, "whatif", *PERIOD, "--changes", changes, "--no-wait", "--csv", "x.csv").returncode == 2
    member = logged_in(tmp_path / "vera", live_server.url, token_for(estate[1]))
    refused = klique(member, "whatif", *PERIOD, "--changes", changes)
    assert refused.returncode == 4 and "Only IT admins run what-if replays." in refused.stderr
