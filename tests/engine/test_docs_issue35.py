"""The worked examples of docs/engine.md section 10d (issue 35: time limits, dependencies, arrays)
run as printed and give the printed events and decisions."""

import copy
import io
import json
import re
from pathlib import Path

import pytest

from apps.engine.core.scenario import parse
from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.simulator import main

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "engine.md").read_text()
SECTION = DOC.split("## 10d. Worked examples", 1)[1].split("\n## ", 1)[0]


def test_the_simulator_runs_of_section_10d_print_what_the_simulator_prints():
    runs = re.findall(
        r"```\n\$ python -m apps.engine.core.simulator (\S+) --until (\d+)\n(.*?)```", SECTION, re.S
    )
    assert [Path(path).stem for path, _, _ in runs] == ["time_limits", "dependencies", "arrays"]
    for path, until, printed in runs:
        out = io.StringIO()
        assert main([str(ROOT / path), "--until", until], stdout=out) == 0
        assert out.getvalue().splitlines()[:-1] == printed.strip().splitlines(), path


def test_the_figures_of_section_10d_are_the_summaries():
    def summary(name):
        out = io.StringIO()
        assert main([str(ROOT / "tests/engine/scenarios" / f"{name}.json")], stdout=out) == 0
        return json.loads(out.getvalue().splitlines()[-1])["summary"]

    limits = summary("time_limits")
    assert limits["policies"]["vision"]["gpu_hours"] == round(150 / 3600, 6) == 0.041667
    assert limits["policies"]["speech"]["gpu_hours"] == round(700 / 3600, 6) == 0.194444
    assert limits["tasks"]["s3"] == {"state": "timed_out", "preemptions": 1, "wait_s": 30}
    assert limits["ends"] == {"timed_out": 2, "dependency_failed": 0}
    deps = summary("dependencies")
    later = {"state": "waiting", "preemptions": 0, "wait_s": 0, "waits_for": ["late"]}
    assert deps["tasks"]["later"] == later
    assert deps["ends"] == {"timed_out": 1, "dependency_failed": 3}
    assert deps["policies"]["ml"]["gpu_hours"] == round(65 / 3600, 6) == 0.018056
    assert deps["pools"]["onprem"]["utilization"] == 0.541667
    arrays = summary("arrays")
    assert [arrays["tasks"][f"hp[{i}]"]["wait_s"] for i in range(6)] == [0, 0, 10, 10, 20, 20]
    assert arrays["pools"]["onprem"]["utilization"] == 105 / 160


def test_the_refusal_of_section_10d_is_the_simulators():
    sc = json.loads((ROOT / "tests/engine/scenarios/time_limits.json").read_text())
    sc = copy.deepcopy(sc)
    sc["events"][3]["submit"]["time_limit_s"] = 121
    with pytest.raises(ScenarioError) as e:
        parse(sc)
    assert f"`{e.value}`" in " ".join(SECTION.split())


def test_the_direct_pass_of_section_10d_gives_the_decisions_it_shows():
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", SECTION, re.S)[3:5]
    scope: dict = {}
    exec("from datetime import UTC, datetime, timedelta\nfrom apps.engine.core import *\n" + code, scope)
    d = scope["d"]
    assert [repr(x) for x in (*d.preemptions, *d.placements, *d.verdicts())] == printed.strip().splitlines()
    assert [v.task for v in d.held_verdicts()] == ["eval"]
    assert [v.task for v in d.array_verdicts()] == ["hp[2]", "hp[3]"]
