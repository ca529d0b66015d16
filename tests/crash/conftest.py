"""The crash tests' shared fixture."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def folder():
    """The processes' folder and logs; ``CRASH_KEEP=1`` keeps it, to read after a failure."""
    path = Path(tempfile.mkdtemp(prefix="klique-crash-"))
    yield path
    if not os.environ.get("CRASH_KEEP"):
        shutil.rmtree(path, ignore_errors=True)
