"""The worked examples of docs/engine.md (sections 9 and 10) run as printed and give the printed
decisions and events."""

import io
import re
from pathlib import Path

from apps.engine.core.simulator import main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "engine.md"


def test_the_worked_example_in_the_engine_docs_gives_the_decisions_it_shows():
    section = DOC.read_text().split("## 9. Worked example", 1)[1].split("\n## ", 1)[0]
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[1:3]
    scope: dict = {}
    exec("from datetime import UTC, datetime, timedelta\nfrom apps.engine.core import *\n" + code, scope)
    decisions = scope["d"]
    shown = [*decisions.preemptions, *decisions.placements, *decisions.verdicts()]
    assert [repr(x) for x in shown] == printed.strip().splitlines()


def _section(title: str) -> str:
    return DOC.read_text().split(title, 1)[1].split("\n## ", 1)[0]


def test_the_worked_examples_of_the_new_rules_print_what_the_simulator_prints(capsys):
    section = _section("## 10. Worked examples")
    runs = re.findall(
        r"```\n\$ python -m apps.engine.core.simulator (\S+) --until (\d+)\n(.*?)```", section, re.S
    )
    assert [Path(path).stem for path, _, _ in runs] == ["budget_windows", "min_runtime", "never_fits"]
    for path, until, printed in runs:
        out = io.StringIO()
        assert main([str(ROOT / path), "--until", until], stdout=out) == 0
        lines = out.getvalue().splitlines()
        assert lines[:-1] == printed.strip().splitlines(), path


def test_the_reclaim_held_example_gives_the_verdict_it_shows():
    section = _section("## 10. Worked examples")
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[2:4]
    scope: dict = {}
    exec("from datetime import UTC, datetime, timedelta\nfrom apps.engine.core import *\n" + code, scope)
    d = scope["d"]
    assert d.preemptions == () and d.placements == ()
    assert [repr(v) for v in d.verdicts()] == printed.strip().splitlines()
