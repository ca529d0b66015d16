"""The worked examples of docs/engine.md section 10e (issue 35: maintenance windows and dated
quota loans) run as printed and give the printed events and decisions."""

import io
import json
import re
from pathlib import Path

from apps.engine.core.simulator import main

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "engine.md").read_text()
SECTION = DOC.split("## 10e. Maintenance windows", 1)[1].split("\n## ", 1)[0]


def test_the_simulator_runs_of_section_10e_print_what_the_simulator_prints():
    runs = re.findall(
        r"```\n\$ python -m apps.engine.core.simulator (\S+) --until (\d+)\n(.*?)```", SECTION, re.S
    )
    assert [Path(path).stem for path, _, _ in runs] == ["maintenance", "loans"]
    for path, until, printed in runs:
        out = io.StringIO()
        assert main([str(ROOT / path), "--until", until], stdout=out) == 0
        assert out.getvalue().splitlines()[:-1] == printed.strip().splitlines(), path


def test_the_pass_of_section_10e_gives_the_printed_decisions():
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", SECTION, re.S)[1:3]
    scope: dict = {}
    exec("from datetime import UTC, datetime, timedelta\nfrom apps.engine.core import *\n" + code, scope)
    d = scope["d"]
    shown = [f"{x.task} {x.pool} {x.reason}" for x in d.preemptions]
    shown += [f"{x.task} {x.pool} {x.phase}" for x in d.placements]
    shown += [
        f"{v.task} {v.position} {v.rule} {v.pools[0]} {v.cause} {v.since.time()} {v.reset_at.time()}"
        for v in d.verdicts()
    ]
    assert shown == printed.strip().splitlines()
    assert [v.task for v in d.maintenance_verdicts()] == ["long", "open"]
    group = d.group_verdict("ml/gpu", 1000)
    assert (group.rule, group.pools, group.cause) == ("maintenance", ("dgx",), "in_maintenance")


def test_the_figures_of_section_10e_are_the_summaries():
    out = io.StringIO()
    assert main([str(ROOT / "tests/engine/scenarios/maintenance.json")], stdout=out) == 0
    summary = json.loads(out.getvalue().splitlines()[-1])["summary"]
    assert summary["policies"]["ml"]["gpu_hours"] == round(1490 / 3600, 6) == 0.413889
    assert summary["pools"]["onprem"]["utilization"] == 890 / 1600
    assert [summary["tasks"][t]["wait_s"] for t in ("u2", "t5", "u1")] == [240, 170, 100]
