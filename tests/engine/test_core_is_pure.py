"""The engine core imports the standard library and itself only (plotly lazily in report.py)."""

import ast
import time
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "apps" / "engine" / "core"
FORBIDDEN_ROOTS = {"django", "rest_framework", "celery"}


def imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node, node.module or ""


def parse(path: Path) -> ast.AST:
    """``ast.parse``, tried again on CPython 3.11's "SystemError: AST constructor recursion depth
    mismatch": 3.11 keeps that depth per interpreter, not per thread, so another thread building an
    AST at the same moment (3.11's traceback module parses source lines to place its carets, e.g.
    while a live server thread logs an error) breaks it (CI saw it twice)."""
    for _ in range(4):
        try:
            return ast.parse(path.read_text(), str(path))
        except SystemError:
            time.sleep(0.05)
    return ast.parse(path.read_text(), str(path))


def test_core_imports_no_django_celery_drf_and_no_other_app():
    modules = sorted(CORE.rglob("*.py"))
    assert modules, f"no modules under {CORE}"
    problems = []
    for path in modules:
        for node, name in imports(parse(path)):
            root = name.split(".")[0]
            if root in FORBIDDEN_ROOTS:
                problems.append(f"{path.name}:{node.lineno} imports {name}")
            if root == "apps" and not (name == "apps.engine.core" or name.startswith("apps.engine.core.")):
                problems.append(f"{path.name}:{node.lineno} imports {name}")
    assert not problems, problems


def test_plotly_is_imported_only_inside_a_function_of_the_report_module():
    for path in sorted(CORE.rglob("*.py")):
        tree = parse(path)
        top_level = [name for node in tree.body for n, name in imports(node) if n is node]
        assert not any(name.split(".")[0] == "plotly" for name in top_level), path.name
        if path.name != "report.py":
            assert not any(name.split(".")[0] == "plotly" for _, name in imports(tree)), path.name
