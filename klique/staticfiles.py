"""The production static files storage: whitenoise's hashed names with gzip and brotli copies, made
fast enough to run on every release (docs/deploy.md, "Static files").

whitenoise compresses every file twice (its original name and its hashed copy, nearly always the
same bytes) at brotli's slowest quality (11, about 2 s per MB): 35 MB took 70 s of CPU. Here each
distinct content is compressed once and its copies reuse the result; files above
``BROTLI_MAX_QUALITY_BYTES`` are compressed at ``BROTLI_LARGE_QUALITY`` (plotly.min.js: 0.5 s
instead of 10 s, 11% larger); source maps (``.map``, fetched only by a browser's developer tools)
are not compressed (``WHITENOISE_SKIP_COMPRESS_EXTENSIONS`` in the production settings).
"""

import hashlib
import threading

from whitenoise.compress import Compressor
from whitenoise.storage import CompressedManifestStaticFilesStorage

try:
    import brotli
except ImportError:  # whitenoise then writes no brotli copies
    brotli = None

BROTLI_MAX_QUALITY_BYTES = 512 * 1024
BROTLI_LARGE_QUALITY = 9


class OnceCompressor(Compressor):
    """A whitenoise compressor that compresses each distinct content once per run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._done: dict[tuple[str, bytes], list] = {}

    def _once(self, kind: str, data: bytes, compress) -> bytes:
        key = (kind, hashlib.sha256(data).digest())
        with self._lock:
            entry = self._done.setdefault(key, [threading.Lock(), None])
        with entry[0]:  # a copy being compressed by another thread is waited for, not redone
            if entry[1] is None:
                entry[1] = compress(data)
        return entry[1]

    def compress_gzip(self, data: bytes) -> bytes:
        return self._once("gzip", data, Compressor.compress_gzip)

    def compress_brotli(self, data: bytes) -> bytes:
        return self._once("brotli", data, brotli_compress)


def brotli_compress(data: bytes) -> bytes:
    """Brotli at quality 11, or ``BROTLI_LARGE_QUALITY`` for large files."""
    quality = 11 if len(data) <= BROTLI_MAX_QUALITY_BYTES else BROTLI_LARGE_QUALITY
    return brotli.compress(data, quality=quality)


class StaticFilesStorage(CompressedManifestStaticFilesStorage):
    """whitenoise's CompressedManifestStaticFilesStorage with ``OnceCompressor``."""

    def create_compressor(self, **kwargs):
        return OnceCompressor(**kwargs)
