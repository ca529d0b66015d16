"""The code's structure as docs/architecture.md states it: the import contracts of pyproject.toml
hold and catch a new upward import; no circle of imports spans two modules; no module passes 500
lines without saying why; the layers diagram in the docs is the one the contracts draw."""

import ast
import pathlib
import subprocess
import sys

import grimp
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINT_IMPORTS = pathlib.Path(sys.executable).with_name("lint-imports")
MAX_LINES = 500
WHY = "Over 500 lines:"


def lint_imports() -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_layer_contracts_hold_and_fail_on_a_new_upward_import():
    """Rule: each app imports only below itself; the pure core, the daemon, the client and the
    cloud drivers import no Django; models import no services. A deliberate upward import (the
    foundation importing the portal) breaks the layers contract."""
    answer = lint_imports()
    assert answer.returncode == 0, answer.stdout + answer.stderr
    probe = ROOT / "apps" / "core" / "_upward_probe.py"
    probe.write_text(
        '"""A deliberate upward import (tests/architecture)."""\n\nimport apps.portal.selectors\n'
    )
    try:
        answer = lint_imports()
    finally:
        probe.unlink()
    assert answer.returncode != 0
    assert "apps.core is not allowed to import apps.portal" in answer.stdout
    assert "apps.core._upward_probe -> apps.portal.selectors" in answer.stdout


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's components of the module graph with more than one module: the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.find_modules_directly_imported_by(target)))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def test_no_circle_of_imports_spans_two_modules():
    """Rule: no circle of imports remains outside one file (imports inside functions count)."""
    graph = grimp.build_graph("apps", "klique")
    assert strongly_connected(graph) == []


def test_the_circle_finder_finds_a_circle():
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    assert strongly_connected(graph) == []
    graph.add_import(importer="c", imported="a")
    assert strongly_connected(graph) == [["a", "b", "c"]]


def long_modules() -> list[tuple[str, int, str]]:
    found = []
    for folder in ("apps", "klique", "bench", "deploy"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            text = path.read_text()
            lines = text.count("\n")
            if lines > MAX_LINES:
                found.append((str(path.relative_to(ROOT)), lines, ast.get_docstring(ast.parse(text)) or ""))
    return found


def test_no_module_passes_500_lines_without_saying_why():
    """Rule: a module over 500 lines says why in its docstring (a sentence starting "Over 500
    lines:"); the rest are split by concern."""
    unexplained = [(path, lines) for path, lines, doc in long_modules() if WHY not in doc]
    assert unexplained == []


def test_the_layers_diagram_in_the_docs_is_the_contracts():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import layers
    finally:
        sys.path.remove(str(ROOT / "docs"))
    assert layers.current() == layers.block(), "run: python docs/layers.py --write"


@pytest.mark.parametrize("contract", ["layers", "pure-core", "no-django-outside", "models-no-services"])
def test_every_contract_is_checked(contract):
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert contract in {c["id"] for c in config["contracts"]}
