"""``deploy/with_env.py`` reads an environment file as systemd's ``EnvironmentFile=`` does (the
cases follow systemd's parser, src/basic/env-file.c) and runs a command with it; the docs use it
wherever ``env $(xargs < file)`` stood, which split quoted values and choked on comments."""

import json
import os
import subprocess
import sys

import pytest

from klique.settings.base import BASE_DIR

WITH_ENV = BASE_DIR / "deploy/with_env.py"
sys.path.insert(0, str(WITH_ENV.parent))
from with_env import parse  # noqa: E402

CASES = [
    ("A=b", {"A": "b"}),
    ("# a comment\n; another\n\nA=b", {"A": "b"}),
    ("  A  =   b c   ", {"A": "b c"}),
    ("A=b # not a comment", {"A": "b # not a comment"}),
    ('A="b  c "', {"A": "b  c "}),
    ("A='b  c '", {"A": "b  c "}),
    ('A="a \\"q\\" \\$x \\\\ \\`c\\` \\n"', {"A": 'a "q" $x \\ `c` \\n'}),
    ("A='$HOME \\n \"x\"'", {"A": '$HOME \\n "x"'}),
    ("A=$HOME ${B}", {"A": "$HOME ${B}"}),
    ("A=a\\ b\\\\c\\#", {"A": "a b\\c#"}),
    ("A=one\\\n  two", {"A": "one  two"}),
    ('A="one\ntwo"', {"A": "one\ntwo"}),
    ("A=", {"A": ""}),
    ('A=""', {"A": ""}),
    ("A=b=c", {"A": "b=c"}),
    ('A=x "y z"', {"A": 'x "y z"'}),
    ('A="x"y', {"A": "xy"}),
    ("NOEQUALS\nA=b", {"A": "b"}),
    ("A=1\nA=2", {"A": "2"}),
    ("A=b\r\nC=d\r\n", {"A": "b", "C": "d"}),
    ("export A=b", {}),
    ("1A=b\nA-B=c\nA_B=d", {"A_B": "d"}),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_parse_follows_systemd(text, expected):
    assert parse(text) == expected


def test_invalid_names_are_reported_and_ignored():
    warnings = []
    assert parse("1A=b\nexport A=b\nOK=1", warn=warnings.append) == {"OK": "1"}
    assert warnings == ["ignoring '1A': not a variable name", "ignoring 'export A': not a variable name"]


def test_a_klique_env_file_reaches_the_command_whole(tmp_path):
    """What broke ``env $(xargs < klique.env)``: a comment, a quoted value with blanks, a ``#`` and
    a ``$`` in a secret."""
    env_file = tmp_path / "klique.env"
    env_file.write_text(
        "# the control plane\n"
        "SECRET_KEY='k$y with #hash and \"quotes\"'\n"
        'DEFAULT_FROM_EMAIL="Klique GPUs <klique@example.org>"\n'
        "ALLOWED_HOSTS=klique.example.org\n"
    )
    names = ("SECRET_KEY", "DEFAULT_FROM_EMAIL", "ALLOWED_HOSTS", "KEPT")
    script = f"import json, os; print(json.dumps({{k: os.environ[k] for k in {names!r}}}))"
    done = subprocess.run(
        [str(WITH_ENV), str(env_file), sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "KEPT": "from the caller", "ALLOWED_HOSTS": "overridden"},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "SECRET_KEY": 'k$y with #hash and "quotes"',
        "DEFAULT_FROM_EMAIL": "Klique GPUs <klique@example.org>",
        "ALLOWED_HOSTS": "klique.example.org",
        "KEPT": "from the caller",
    }
    printed = subprocess.run([str(WITH_ENV), "--print", str(env_file)], capture_output=True, text=True)
    assert printed.stdout.splitlines()[0] == 'SECRET_KEY=k$y with #hash and "quotes"'


def test_usage_and_errors_exit_nonzero_without_a_traceback(tmp_path):
    usage = subprocess.run([str(WITH_ENV)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
    missing = subprocess.run(
        [str(WITH_ENV), str(tmp_path / "none.env"), "true"], capture_output=True, text=True
    )
    assert missing.returncode == 1 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "ok.env").write_text("A=b\n")
    absent = subprocess.run(
        [str(WITH_ENV), str(tmp_path / "ok.env"), "no-such-program-h4"], capture_output=True, text=True
    )
    assert absent.returncode == 127 and "cannot run" in absent.stderr


def test_the_docs_commands_read_env_files_with_the_helper_only():
    for doc in ("docs/deploy.md", "docs/workers.md"):
        blocks = (BASE_DIR / doc).read_text().split("```")[1::2]
        assert not [line for block in blocks for line in block.splitlines() if "xargs" in line], doc
    assert "deploy/with_env.py /etc/klique/klique.env" in (BASE_DIR / "docs/deploy.md").read_text()
