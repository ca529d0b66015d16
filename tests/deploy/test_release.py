"""Releases (docs/releases.md): pyproject's version is the one source, the admin's index shows it,
and the changelog has its entry with upgrade notes."""

import re
import tomllib

import pytest

from klique.settings.base import BASE_DIR
from klique.version import VERSION

PYPROJECT_VERSION = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["project"]["version"]


def test_the_installed_version_is_pyprojects():
    assert VERSION == PYPROJECT_VERSION  # pip install (make install) rewrites the metadata


def test_the_changelog_has_the_release_with_upgrade_notes():
    changelog = (BASE_DIR / "CHANGELOG.md").read_text()
    releases = re.split(r"^## ", changelog, flags=re.M)[1:]
    entry = next((r for r in releases if r.startswith(f"{PYPROJECT_VERSION} ")), None)
    assert entry, f"CHANGELOG.md has no '## {PYPROJECT_VERSION} ...' heading"
    assert "### Upgrade notes" in entry


@pytest.mark.django_db
def test_the_admin_index_shows_the_release_after_login_only(client, django_user_model):
    assert f"release {VERSION}" not in client.get("/admin/login/").content.decode()
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.org", "x"))
    assert f"Klique admin, release {VERSION}" in client.get("/admin/").content.decode()
