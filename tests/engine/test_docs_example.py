"""The worked example of docs/engine.md section 9 runs as printed and gives the printed decisions."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "engine.md"


def test_the_worked_example_in_the_engine_docs_gives_the_decisions_it_shows():
    section = DOC.read_text().split("## 9. Worked example", 1)[1].split("\n## ", 1)[0]
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[1:3]
    scope: dict = {}
    exec("from datetime import UTC, datetime, timedelta\nfrom apps.engine.core import *\n" + code, scope)
    decisions = scope["d"]
    shown = [*decisions.preemptions, *decisions.placements, *decisions.verdicts()]
    assert [repr(x) for x in shown] == printed.strip().splitlines()
