"""The production static storage (``klique.staticfiles``): each distinct content is compressed once,
large files at a faster brotli quality, source maps not at all; the copies are still written."""

import brotli
import pytest

from klique import staticfiles
from tests.deploy.test_production import manage, production_env


def test_identical_files_are_compressed_once_and_both_get_their_copies(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        staticfiles, "brotli_compress", lambda data: calls.append(data) or brotli.compress(data)
    )
    body = b"function plot() { return 42; }\n" * 2000
    for name in ("plotly.min.js", "plotly.min.4e5e94f2bb83.js"):
        (tmp_path / name).write_bytes(body)
    (tmp_path / "other.js").write_bytes(body + b"// other\n")
    compressor = staticfiles.OnceCompressor(quiet=True)
    for name in ("plotly.min.js", "plotly.min.4e5e94f2bb83.js", "other.js"):
        assert sorted(p.rsplit(".", 1)[1] for p in compressor.compress(str(tmp_path / name))) == ["br", "gz"]
    assert len(calls) == 2  # one per distinct content
    for name in ("plotly.min.js", "plotly.min.4e5e94f2bb83.js"):
        assert brotli.decompress((tmp_path / f"{name}.br").read_bytes()) == body


@pytest.mark.parametrize("size, quality", [(100_000, 11), (staticfiles.BROTLI_MAX_QUALITY_BYTES + 1, 9)])
def test_large_files_use_the_faster_brotli_quality(monkeypatch, size, quality):
    seen = {}
    monkeypatch.setattr(staticfiles.brotli, "compress", lambda data, quality: seen.setdefault("q", quality))
    staticfiles.brotli_compress(b"x" * size)
    assert seen["q"] == quality


def test_production_uses_the_storage_and_skips_source_maps(tmp_path):
    code = (
        "from django.conf import settings; from django.core.files.storage import storages; "
        "from whitenoise.compress import Compressor; "
        "c = Compressor(extensions=settings.WHITENOISE_SKIP_COMPRESS_EXTENSIONS); "
        "print(type(storages['staticfiles']).__module__, "
        "c.should_compress('a.js.map'), c.should_compress('a.js'))"
    )
    done = manage(production_env(tmp_path), "shell", "-v", "0", "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["klique.staticfiles", "False", "True"]
