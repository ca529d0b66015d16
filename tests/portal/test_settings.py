"""Settings come from the environment; production refuses the development secret key."""

import os
import subprocess
import sys

from django.conf import settings

from klique.settings.base import BASE_DIR


def run_settings(module: str, **env) -> subprocess.CompletedProcess:
    code = f"import django, os; os.environ['DJANGO_SETTINGS_MODULE']='{module}'; django.setup()"
    environment = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"}
    } | env
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_refuses_the_development_secret_key():
    result = run_settings("klique.settings.production")
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_production_refuses_debug():
    result = run_settings("klique.settings.production", SECRET_KEY="x" * 50, DEBUG="true")
    assert "DEBUG must be off" in result.stderr


def test_production_needs_its_allowed_hosts():
    result = run_settings("klique.settings.production", SECRET_KEY="x" * 50)
    assert "ALLOWED_HOSTS must name" in result.stderr


def test_production_starts_with_a_real_secret_key_and_its_hosts():
    result = run_settings(
        "klique.settings.production", SECRET_KEY="x" * 50, ALLOWED_HOSTS="klique.example.org"
    )
    assert result.returncode == 0, result.stderr


def test_times_are_utc():
    assert settings.USE_TZ and settings.TIME_ZONE == "UTC"
