"""bench/start_time.py reads make's output into phases (docs/benchmarks.md, "Start-up"). Its full
run, `make run` to the first page and Ctrl-C, is what tests/deploy/test_make_run.py already does
(45-110 s), so the smoke here is the phase reading, on the lines both Makefiles echo."""

import importlib.util
import subprocess

from klique.settings.base import BASE_DIR

spec = importlib.util.spec_from_file_location("start_time", BASE_DIR / "bench" / "start_time.py")
start_time = importlib.util.module_from_spec(spec)
spec.loader.exec_module(start_time)

BEFORE = [
    (0.0, "python3 -m venv .venv"),
    (5.7, ".venv/bin/python -m pip install --quiet --upgrade pip"),
    (9.7, '.venv/bin/python -m pip install --quiet -e ".[server,kubernetes,docker,test]"'),
    (123.7, "touch .venv/.installed"),
    (123.7, ".venv/bin/python manage.py migrate --no-input"),
    (130.0, "  Applying tasks.0001_initial... OK"),
    (158.8, "mkdir -p var"),
    (158.8, ".venv/bin/python manage.py seed_demo"),
    (176.7, "Klique: portal http://127.0.0.1:8000/  admin http://127.0.0.1:8000/admin/  (Ctrl-C stops all)"),
]


def test_start_time_phases_of_the_pip_makefile_one_per_recipe_line():
    assert [(name, round(s, 1)) for name, s in start_time.phases(BEFORE, 195.6)] == [
        ("venv", 5.7),
        ("pip upgrade", 4.0),
        ("packages", 114.0),
        ("migrate", 35.1),
        ("seed", 17.9),
        ("servers start", 18.9),
    ]


def test_start_time_phases_of_this_makefile_migrate_and_seed_in_one_line():
    seed = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", ".venv/.installed-server", "seed"],
        cwd=BASE_DIR,
        capture_output=True,
    )
    one_process = seed.stdout.decode().splitlines()[-1]
    lines = [
        (0.0, "python3 -m venv --without-pip .venv"),
        (0.5, "python3 -m pip --python .venv/bin/python install --quiet uv"),
        (3.0, '.venv/bin/uv pip install --quiet --python .venv/bin/python pip -e ".[server,sessions]"'),
        (16.0, one_process),
        (
            56.0,
            "Klique: portal http://127.0.0.1:8000/  admin http://127.0.0.1:8000/admin/  (Ctrl-C stops all)",
        ),
    ]
    names = [name for name, _ in start_time.phases(lines, 82.0)]
    assert names == ["venv", "uv into .venv", "packages", "migrate + seed", "servers start"]
