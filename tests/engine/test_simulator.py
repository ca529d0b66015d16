"""The simulator contract: command line, virtual clock, output, and bad input (exit 2)."""

import copy
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from apps.engine.core.simulator import main

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 10,
    "pools": [{"name": "onprem", "capacity": 2, "gpu_type": "A100"}],
    "profiles": [
        {"name": "gpu", "gpus": 1, "pools": ["onprem"]},
        {"name": "any", "gpus": 1, "size_from_task": True, "pools": ["onprem"]},
    ],
    "policies": [{"name": "A", "reservation": 1, "limit": 2, "budget": {"hours": 1, "period": "day"}}],
    "compute_resources": [
        {"name": "a", "policy": "A", "profile": "gpu"},
        {"name": "a-any", "policy": "A", "profile": "any"},
    ],
    "events": [{"at": 0, "submit": {"id": "t1", "resource": "a", "duration_s": 3}}],
}


def run(scenario, *args, tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(scenario if isinstance(scenario, str) else json.dumps(scenario))
    out, err = io.StringIO(), io.StringIO()
    code = main([str(path), *args], stdout=out, stderr=err)
    return (
        code,
        [json.loads(x) for x in out.getvalue().splitlines()] if code == 0 else out.getvalue(),
        err.getvalue(),
    )


def changed(path, value):
    s = copy.deepcopy(BASE)
    target = s
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return s


def with_event(event):
    s = copy.deepcopy(BASE)
    s["events"].append(event)
    return s


BAD = [
    ("{not json", "JSON: "),
    (changed(["pools", 0, "capacity"], -1), "pools[0].capacity: must be >= 0"),
    (changed(["pools", 0, "capacity"], KeyError), "pools[0].capacity: required"),
    (changed(["profiles", 0, "pools"], ["nowhere"]), "profiles[0].pools[0]: unknown pool 'nowhere'"),
    (changed(["profiles", 0, "gpus"], -0.5), "profiles[0].gpus: must be >= 0"),
    (changed(["profiles", 0, "gpus"], 0.0001), "profiles[0].gpus: must be a multiple of 0.001 GPU"),
    (changed(["profiles", 0, "gpus"], 1.5), "profiles[0].gpus: above 1 a GPU size must be whole, got 1.5"),
    (
        with_event({"at": 1, "submit": {"id": "x", "resource": "a-any", "gpus": 1.25, "duration_s": 1}}),
        "events[1].submit.gpus: above 1 a GPU size must be whole",
    ),
    (changed(["policies", 0, "limit"], 0.5), "policies[0].limit: 0.5 GPUs is below the reservation of 1 GPU"),
    (changed(["policies", 0, "reservaton"], 1), "policies[0].reservaton: unknown field"),
    (changed(["policies", 0, "parent"], "ghost"), "policies[0].parent: unknown policy 'ghost'"),
    (changed(["policies", 0, "budget"], {"hours": 1, "period": "year"}), "policies[0].budget.period"),
    (changed(["compute_resources", 0, "policy"], "B"), "compute_resources[0].policy: unknown policy 'B'"),
    (
        changed(["compute_resources", 0, "profile"], "tpu"),
        "compute_resources[0].profile: unknown profile 'tpu'",
    ),
    (
        changed(["profiles", 0, "gpus"], 4),
        "compute_resources[0].profile: profile 'gpu' (4 GPUs) is larger than",
    ),
    (changed(["start"], "2025-01-06T00:00:00"), "start: needs a UTC offset"),
    (changed(["pass_interval_s"], 0), "pass_interval_s: must be > 0"),
    (changed(["pass_interval_s"], 0.0000001), "pass_interval_s: must be a multiple of 1 microsecond"),
    (changed(["execution_order"], {"onprem": ["tpu"]}), "execution_order.onprem[0]: unknown profile 'tpu'"),
    (changed(["queuing_order"], {"gpu": ["B"]}), "queuing_order.gpu[0]: unknown policy 'B'"),
    (
        with_event({"at": 1, "submit": {"id": "t1", "resource": "a", "duration_s": 1}}),
        "submit.id: task 't1' is submitted twice",
    ),
    (
        with_event({"at": 1, "submit": {"id": "x", "resource": "zz", "duration_s": 1}}),
        "events[1].submit.resource: unknown compute resource 'zz'",
    ),
    (
        with_event({"at": 1, "submit": {"id": "x", "resource": "a-any", "gpus": -1, "duration_s": 1}}),
        "events[1].submit.gpus: must be >= 0",
    ),
    (
        with_event({"at": 1, "submit": {"id": "x", "resource": "a-any", "gpus": 3, "duration_s": 1}}),
        "events[1].submit.gpus: 3 GPUs is larger than the limit",
    ),
    (
        with_event({"at": 1, "submit": {"id": "x", "resource": "a", "gpus": 2, "duration_s": 1}}),
        "events[1].submit.gpus: profile 'gpu' has a fixed size",
    ),
    (with_event({"at": -1, "cancel": "t1"}), "events[1].at: must be >= 0"),
    (with_event({"at": 1, "cancel": "nobody"}), "events[1].cancel: unknown task 'nobody'"),
    (
        with_event({"at": 1, "set_limit": {"policy": "A", "limit": 0.5}}),
        "events[1].set_limit.limit: limit 0.5 GPUs would be below the reservation",
    ),
    (
        with_event({"at": 1, "set_reservation": {"policy": "A", "reservation": 3}}),
        "events[1].set_reservation.reservation",
    ),
    (
        with_event({"at": 1, "set_capacity": {"pool": "cloud", "capacity": 3}}),
        "events[1].set_capacity.pool: unknown pool 'cloud'",
    ),
    (
        with_event({"at": 1, "set_budget": {"policy": "A", "hours": -2}}),
        "events[1].set_budget.hours: must be >= 0",
    ),
    (with_event({"at": 1, "engine": "pause"}), "events[1].engine: must be"),
    (
        changed(["policies", 0, "budgets"], [{"hours": 1, "period": "day"}]),
        "policies[0].budgets: give budget (one window) or budgets (a list), not both",
    ),
    (
        changed(
            ["policies", 0],
            {
                "name": "A",
                "reservation": 1,
                "limit": 2,
                "budgets": [{"hours": 1, "period": "day"}, {"hours": 2, "period": "day"}],
            },
        ),
        "policies[0].budgets[1].period: a policy has one window per period",
    ),
    (
        changed(
            ["policies", 0],
            {
                "name": "A",
                "reservation": 1,
                "limit": 2,
                "budgets": [{"hours": 1, "period": "day"}, {"hours": 9, "period": "month"}],
            },
        )
        | {"events": [{"at": 1, "set_budget": {"policy": "A", "hours": 2}}]},
        "events[0].set_budget.period: policy 'A' has several budget windows (day, month); name the one",
    ),
    (
        with_event({"at": 1, "set_budget": {"policy": "A", "hours": 2, "period": "week"}}),
        "events[1].set_budget.period: policy 'A' has no 'week' budget window",
    ),
    (changed(["profiles", 0, "min_runtime_s"], -5), "profiles[0].min_runtime_s: must be a whole number >= 0"),
    (
        changed(["policies", 0, "max_preemptions_per_hour"], 1.5),
        "policies[0].max_preemptions_per_hour: must be a whole number >= 0",
    ),
    (with_event({"at": 1}), "events[1]: needs exactly one of"),
]


@pytest.mark.parametrize("scenario, message", BAD, ids=[m for _, m in BAD])
def test_bad_input_exits_2_with_one_line_naming_the_field(scenario, message, tmp_path):
    code, out, err = run(scenario, tmp_path=tmp_path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("simulate: ") and "Traceback" not in err
    assert message in err


def test_a_profile_larger_than_a_lowered_limit_is_refused(tmp_path):
    s = with_event({"at": 1, "set_limit": {"policy": "A", "limit": 1}})
    s["profiles"][0]["gpus"] = 2
    s["policies"][0]["limit"] = 2
    code, _, err = run(s, tmp_path=tmp_path)
    assert (
        code == 2
        and "events[1].set_limit.limit: profile 'gpu' (2 GPUs) would be larger than the limit" in err
    )


def test_missing_file_and_bad_until_exit_2(tmp_path):
    err = io.StringIO()
    assert main([str(tmp_path / "none.json")], stderr=err) == 2 and "No such file" in err.getvalue()
    code, _, err = run(BASE, "--until", "soon", tmp_path=tmp_path)
    assert code == 2 and err.startswith("simulate: --until")


def test_runs_as_a_module_and_bad_input_shows_no_traceback(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(BASE))
    bad.write_text(json.dumps(changed(["pools", 0, "capacity"], -1)))
    cmd = [sys.executable, "-m", "apps.engine.core.simulator"]
    ok = subprocess.run([*cmd, str(good)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and json.loads(ok.stdout.splitlines()[0]) == {
        "at": 0,
        "task": "t1",
        "event": "placed",
        "pool": "onprem",
    }
    no = subprocess.run([*cmd, str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert (
        no.returncode == 2
        and no.stdout == ""
        and no.stderr == "simulate: pools[0].capacity: must be >= 0, got -1\n"
    )


def test_sub_second_steps_are_exact_with_no_float_drift(tmp_path):
    s = copy.deepcopy(BASE)
    s["pass_interval_s"] = 0.1
    s["duration_s"] = 4
    s["events"] = [
        {"at": 0, "submit": {"id": f"t{i}", "resource": "a", "duration_s": 0.3}} for i in range(10)
    ]
    s["policies"][0]["limit"] = 1
    code, lines, _ = run(s, tmp_path=tmp_path)
    assert code == 0
    done = [e["at"] for e in lines if e.get("event") == "completed"]
    assert done == [0.3, 0.6, 0.9, 1.2, 1.5, 1.8, 2.1, 2.4, 2.7, 3]


def test_until_stops_the_clock_and_summary_only_prints_the_summary(tmp_path):
    s = copy.deepcopy(BASE)
    s["events"].append({"at": 5, "submit": {"id": "late", "resource": "a", "duration_s": 1}})
    code, lines, _ = run(s, "--until", "4", tmp_path=tmp_path)
    assert code == 0 and [e.get("task") for e in lines[:-1]] == ["t1", "t1"]
    assert set(lines[-1]["summary"]["tasks"]) == {"t1"}
    code, lines, _ = run(s, "--summary-only", tmp_path=tmp_path)
    assert code == 0 and len(lines) == 1 and lines[0]["summary"]["tasks"]["late"]["state"] == "completed"


def test_report_is_one_self_contained_html_file_with_plotly_inlined(tmp_path):
    report = tmp_path / "report.html"
    code, lines, _ = run(BASE, "--report", str(report), tmp_path=tmp_path)
    html = report.read_text()
    assert code == 0 and "summary" in lines[-1]
    assert '<script src="http' not in html and "cdn.plot.ly/plotly" not in html
    assert "Plotly.newPlot" in html and len(html) > 1_000_000
    for title in ("GPUs in use per policy", "GPUs in use per pool", "Tasks waiting per policy"):
        assert title in html


def test_canceling_a_finished_task_prints_nothing(tmp_path):
    s = with_event({"at": 5, "cancel": "t1"})
    code, lines, _ = run(s, tmp_path=tmp_path)
    assert code == 0 and [e["event"] for e in lines[:-1]] == ["placed", "completed"]


@pytest.mark.parametrize("where", ["missing/report.html", "."])
def test_a_report_path_that_cannot_be_written_exits_2_before_the_run(tmp_path, where):
    code, out, err = run(BASE, "--report", str(tmp_path / where), tmp_path=tmp_path)
    assert code == 2 and out == "" and err.startswith("simulate: --report: ") and err.count("\n") == 1


@pytest.mark.parametrize("args", [[], ["--no-such-flag"], ["--until"]])
def test_bad_arguments_are_one_line_on_stderr_and_exit_2(tmp_path, args):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(BASE))
    err = io.StringIO()
    argv = args if not args or args == ["--no-such-flag"] else [str(path), *args]
    assert main(argv, stdout=io.StringIO(), stderr=err) == 2
    assert err.getvalue().startswith("simulate: ") and err.getvalue().count("\n") == 1


def test_json_nested_too_deeply_is_bad_input_not_a_traceback(tmp_path):
    code, _, err = run("[" * 100_000 + "]" * 100_000, tmp_path=tmp_path)
    assert code == 2 and err == "simulate: JSON: nested too deeply\n"


def test_the_manage_py_command_runs_the_simulator_without_a_database(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(BASE))
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
    done = subprocess.run(
        [sys.executable, "manage.py", "simulate", str(path), "--summary-only"],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["tasks"]["t1"]["state"] == "completed"
    bad = subprocess.run(
        [sys.executable, "manage.py", "simulate", str(tmp_path / "none.json")],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("simulate: ") and "Traceback" not in bad.stderr
