"""A smoke run of deploy/k8s-dev/bench.py (docs/benchmarks.md), so the benchmark keeps running from
main: five tasks against its own control plane; the figures are the benchmark's, not checked here."""

import subprocess
import sys
from pathlib import Path

from tests import kube
from tests.conftest import _fail_or_skip

ROOT = Path(__file__).resolve().parents[2]


def test_the_kubernetes_benchmark_runs_and_reports_its_three_figures():
    if why := kube.missing_tools():
        _fail_or_skip(why)
    done = subprocess.run(
        [sys.executable, ROOT / "deploy/k8s-dev/bench.py", "--tasks", "5"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "5 tasks: create pod median" in done.stdout and "all exits seen" in done.stdout
