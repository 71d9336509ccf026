"""On-disk cache of resolved answers and plans, keyed by the binary's build-id.

What is cached depends only on the binary's bytes, so an entry is never stale: a
rebuilt binary has a new build-id. Writes are atomic; a broken entry is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from agent import __version__


def _code_stamp() -> str:
    """Changes whenever the code that computes cached answers changes (even unreleased)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256(__version__.encode())
    for f in [*sorted((root / "target").rglob("*.py")), *sorted((root / "plan").glob("*.py")),
              root / "tools" / "inspect.py"]:
        st = f.stat()
        h.update(f"{f.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


_SCHEMA = _code_stamp()


def cache_dir() -> Path:
    """``$NOOP_CACHE_DIR``, else /var/cache/noop for root, else the XDG cache."""
    env = os.environ.get("NOOP_CACHE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/noop")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "noop"


def fingerprint(path: str | os.PathLike[str]) -> str:
    """A digest of the file's bytes: answers cached for one file are never given for
    another with the same build-id (a damaged or altered copy). Hashed once per
    process and file version (about 20 ms for 12 MB)."""
    st = os.stat(path)
    return _digest(str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: str, _dev: int, _ino: int, _size: int, _mtime: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:16]


def _path(build_id: str, kind: str, key: str) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return cache_dir() / "dwarf" / _SCHEMA / build_id / f"{kind}-{digest}.json"


def get(build_id: str, kind: str, key: str) -> Any | None:
    if os.environ.get("NOOP_NO_CACHE"):
        return None
    try:
        with open(_path(build_id, kind, key), encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    return entry.get("value") if isinstance(entry, dict) and entry.get("key") == key else None


def put(build_id: str, kind: str, key: str, value: Any) -> None:
    """Store ``value``; a cache that cannot be written is silently skipped."""
    if os.environ.get("NOOP_NO_CACHE"):
        return
    path = _path(build_id, kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "value": value}, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:
        return
