"""The engine core imports the standard library and itself only (plotly lazily in report.py)."""

import ast
import gc
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
    """``ast.parse`` with the garbage collector paused: on CPython 3.11.7 a collection that runs
    Python code (a finaliser of something an earlier test left) in the middle of the AST's
    construction fails it with "SystemError: AST constructor recursion depth mismatch" (CI saw it)."""
    gc.disable()
    try:
        return ast.parse(path.read_text(), str(path))
    finally:
        gc.enable()


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
        tree = ast.parse(path.read_text(), str(path))
        top_level = [name for node in tree.body for n, name in imports(node) if n is node]
        assert not any(name.split(".")[0] == "plotly" for name in top_level), path.name
        if path.name != "report.py":
            assert not any(name.split(".")[0] == "plotly" for _, name in imports(tree)), path.name
