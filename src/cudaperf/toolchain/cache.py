"""The content-addressed build cache on disk: where it lives, how keys are made, how entries are written.

Covers: the cache root (`$CUDAPERF_CACHE_DIR`, default `~/.cache/cudaperf`), sha256 keys over
length-prefixed parts (so ("ab", "c") and ("a", "bc") differ), and atomic writes (temp file in the same
directory, then `os.replace`), which make concurrent writers of the same key safe: every reader sees
either no entry or one complete entry, never a torn file.

Not covered: what is stored (see `nvrtc.py` and `inline.py`), eviction (the cache only grows; delete the
directory to reset it).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

# Bump when the layout or meaning of cached entries changes: old entries are then simply never hit.
CACHE_FORMAT_VERSION = "1"


def default_cache_dir() -> Path:
    """`$CUDAPERF_CACHE_DIR`, else `~/.cache/cudaperf`."""
    env = os.environ.get("CUDAPERF_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "cudaperf"


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def content_key(*parts: str | bytes) -> str:
    """sha256 hex digest of the parts, each prefixed by its length so boundaries count."""
    h = hashlib.sha256(CACHE_FORMAT_VERSION.encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that no reader ever sees a partial file.

    The temp file sits in the destination directory because `os.replace` is atomic only within one file
    system. No fsync: a cache entry lost to a power cut is recompiled, which is cheaper than an fsync per
    compile.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file 0600; sandboxed workers run as uids of their own and only read the cache,
        # so entries are world-readable (never writable: the workers' view of the cache is read-only).
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
