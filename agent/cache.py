"""On-disk cache of resolved answers and plans, keyed by the binary's build-id.

What is cached depends only on the binary's bytes, so an entry is never stale: a
rebuilt binary has a new build-id. An entry is one header line, ``noop-cache FORMAT
SHA256``, then its JSON text, the digest taken over those bytes as written. ``get``
gives out nothing it has not verified: a damaged, truncated or foreign entry, or a
value of a shape its caller cannot use, is a miss and the answer is computed again.
Writes are atomic, and a write that fails leaves nothing behind. A cache that cannot
be written (no directory there, a full or read-only disk) degrades to none: noop says
so once, computes its answers again, and keeps the files it must make to read a
binary (DWARF made from Go's metadata) in a private directory removed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, overload

import orjson

from agent import __version__, cpus, files, logs
from agent.files import cache_dir as cache_dir  # where it was first: callers import it here

T = TypeVar("T")

FORMAT = 1  # the entry's layout: the header line, then {"key": ..., "value": ...}
_MAGIC = b"noop-cache"


_AGENT = Path(__file__).resolve().parent


# What noop's code is made of: its modules, and the walk of DWARF units in C, as source
# and as the extension built from it (the same walk answers where it was not built).
_CODE = (".py", ".c", ".so")


def _code_stamp(root: Path = _AGENT) -> str:
    """Changes whenever noop's code changes (even unreleased): every module under
    ``root``, whatever its package is named or moved to, and the C walk, built or not. A
    list of the packages that compute cached answers went stale once (a package renamed
    was no longer in it)."""
    h = hashlib.sha256(__version__.encode())
    for f in sorted(p for p in root.rglob("*") if p.suffix in _CODE):  # one walk
        st = f.stat()
        h.update(f"{f.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


_SCHEMA = _code_stamp()


_state = threading.Lock()
_said: list[str] = []  # the one warning said, when the cache could not be written
_scratch: list[Path] = []  # the private directory used instead, made at most once
_failed: list[int] = []  # the errno of the last write that failed
_pending: dict[Path, int] = {}  # entries a child is writing (``put_aside``): its pid


def unwritable(where: str | os.PathLike[str], exc: OSError) -> None:
    """Says once that the cache cannot be written, where and why."""
    with _state:
        _failed[:] = [exc.errno or errno.EIO]  # the last one: a child's exit status
        if _said:
            return
        _said.append(str(where))
    reason = files.why(exc)
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):  # which part is not a directory
        for part in (Path(where), *Path(where).parents):
            if part.exists() or part.is_symlink():
                if not part.is_dir():
                    where, reason = part, files.kind(part) or "not a directory"
                break
    logs.say(f"cache: {where}: {reason}: nothing is kept there, answers are computed "
             "again on each start (free the disk, or set NOOP_CACHE_DIR to a writable "
             "directory)", logs.WARNING)


def private(*parts: str) -> Path:
    """``parts`` under this process's own temporary directory, removed at exit."""
    with _state:
        if not _scratch:
            made = Path(tempfile.mkdtemp(prefix="noop-cache-"))
            atexit.register(shutil.rmtree, made, True)
            _scratch.append(made)
        path = _scratch[0].joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomic(path: Path, data: bytes) -> bool:
    """Puts ``data`` at ``path`` whole or not at all (a temporary file beside it, moved
    into place); False, with the warning once, when it cannot be written. A write
    that fails or is interrupted leaves no partial file to fill the disk."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError as exc:
        unwritable(cache_dir(), exc)
        return False
    except ValueError:
        return False
    done = False
    try:
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        done = True
    except OSError as exc:
        unwritable(cache_dir(), exc)
    finally:  # also when interrupted
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return done


def fingerprint(path: str | os.PathLike[str]) -> str:
    """A digest of the file's bytes: answers cached for one file are never given for
    another with the same build-id (a damaged or altered copy). Hashed once per file
    version (``files.digest``: 50 ms for 50 MB, 130 ms for 130 MB), then kept under
    what the file's inode says of it: device, inode, size, and the modification and
    change times in nanoseconds (any write to the file changes its change time, which
    no one can set back; a file put in its place is another inode)."""
    st = os.stat(path)
    return _digest(str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                   st.st_ctime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: str, dev: int, ino: int, size: int, mtime: int, ctime: int) -> str:
    key = f"{dev}:{ino}:{size}:{mtime}:{ctime}"
    kept = get("files", "pieces", key, load=_hex16)
    if kept is not None:
        return kept
    digest = files.digest(path)
    put("files", "pieces", key, digest)
    return digest


def _hex16(value: object) -> str:
    if not (isinstance(value, str) and len(value) == 16 and
            all(c in "0123456789abcdef" for c in value)):
        raise ValueError(f"not a digest: {value!r}")
    return value


def _path(build_id: str, kind: str, key: str) -> Path:
    # surrogatepass: a key from the command line may hold bytes that are not UTF-8
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return cache_dir() / "dwarf" / _SCHEMA / build_id / f"{kind}-{digest}.json"


def _header(body: bytes) -> bytes:
    return b"%s %d %s\n" % (_MAGIC, FORMAT, hashlib.sha256(body).hexdigest().encode())


def encode(key: str, value: Any) -> bytes:
    """The bytes of an entry: the header line with the digest of the JSON text after it.
    Written by orjson (32 MB of function names in 0.05 s against the json module's 0.3 s)
    where it writes what ``json.dumps`` would mean: a value it refuses (a key that is not
    a string, an integer past 64 bits, a lone surrogate) or that holds a null (which
    may be a float that is not finite, which orjson writes as null) is written by json,
    which refuses what it cannot keep: NaN, infinities, sets, objects. (An Enum or a
    UUID, which no caller puts, orjson writes as its value, where json refused it.)"""
    entry = {"key": key, "value": value}
    try:
        body = orjson.dumps(entry, option=_NATIVE)
        if not _holds_null(body):
            return _header(body) + body
    except TypeError:  # orjson.JSONEncodeError too
        pass
    body = json.dumps(entry, separators=(",", ":"), allow_nan=False).encode()
    return _header(body) + body


# What orjson writes natively but json refuses: handed to ``default`` (none), refused.
_NATIVE = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | \
    orjson.OPT_PASSTHROUGH_SUBCLASS


def _holds_null(body: bytes) -> bool:
    """Whether compact JSON text ``body`` (an object) may hold a null value: a ``null``
    after a colon, a comma or a bracket and before a comma or a closing bracket, as
    every null value is; in a string by chance too (``f(a,null)``: then json writes it,
    at its own speed)."""
    at = body.find(b"null")
    while at > 0:
        if body[at - 1] in _BEFORE and at + 4 < len(body) and body[at + 4] in _AFTER:
            return True
        at = body.find(b"null", at + 4)
    return False


_BEFORE, _AFTER = frozenset(b":,["), frozenset(b",]}")


def decode(raw: bytes, key: str) -> Any:
    """The value an entry's bytes keep for ``key``; ValueError when the header is not
    this format's, the digest is not the text's, or the entry is for another key."""
    head, newline, body = raw.partition(b"\n")
    if not newline or head + newline != _header(body):
        raise ValueError("not an entry of this format, or its digest does not match")
    entry = json.loads(body)
    if not isinstance(entry, dict) or entry.get("key") != key or "value" not in entry:
        raise ValueError("an entry for another key")
    return entry["value"]


def _raw(value: Any) -> Any:
    return value


@overload
def get(build_id: str, kind: str, key: str) -> Any | None: ...
@overload
def get(build_id: str, kind: str, key: str, load: Callable[[Any], T]) -> T | None: ...
def get(build_id: str, kind: str, key: str, load: Callable[[Any], Any] = _raw) -> Any:
    """``load(value)`` of the entry kept for (build_id, kind, key), or None: a miss when
    there is none, when it does not verify, or when ``load`` raises anything. ``load``
    turns the JSON into the shape its caller needs and raises on any other (``shaped``
    makes one from a type); without it the value is given as read."""
    if os.environ.get("NOOP_NO_CACHE"):
        return None
    try:
        path = _path(build_id, kind, key)
        _wait(_pending.pop(path, 0))  # being written by a child: done first
        raw = path.read_bytes()
    except (OSError, ValueError):  # ValueError: a NUL in a name
        return None
    # Broad on purpose: whatever is wrong with an entry (damaged bytes, JSON nested past
    # the recursion limit, a value no caller of this noop wrote, a loader's KeyError on
    # it), it is not used, and the answer is computed again as on a miss.
    try:
        return load(decode(raw, key))
    except Exception:
        return None


def put(build_id: str, kind: str, key: str, value: Any) -> None:
    """Store ``value``; never raises: a cache that cannot be written (a full or read-only
    disk, no permission: said once) or a value JSON cannot keep is skipped."""
    if os.environ.get("NOOP_NO_CACHE"):
        return
    try:
        data = encode(key, value)
    except (TypeError, ValueError, RecursionError):
        return
    try:
        path = _path(build_id, kind, key)
    except ValueError:
        return
    write_atomic(path, data)


def put_aside(build_id: str, kind: str, key: str, value: Any) -> None:
    """``put``, by a forked child while this process goes on (a large entry's JSON text
    and digest take a CPU for a while); waited for before the entry is read back and at
    exit, so nothing is left being written. Put here when threads run (a fork copies
    one thread, with whatever locks the others held) or no child can be made. The
    child says nothing; its failure is said here, once, as any write's."""
    if os.environ.get("NOOP_NO_CACHE"):
        return
    try:
        path = _path(build_id, kind, key)
    except ValueError:
        return
    pid = _fork() if cpus.alone() else -1
    if pid < 0:
        put(build_id, kind, key, value)
    elif pid == 0:  # pragma: no cover - the child: what it wrote is tested
        code = _SILENT  # anything but a write that failed: said by no one
        try:
            _said.append("")  # silent: the parent says why, from the exit status
            _failed.clear()
            put(build_id, kind, key, value)
            code = min(_failed[-1], _SILENT - 1) if _failed else 0
        finally:
            os._exit(code)
    else:
        if not _pending:
            atexit.register(settle)
        _wait(_pending.pop(path, 0))
        _pending[path] = pid


_SILENT = 255  # a put_aside child's exit status when it failed otherwise than writing


def _fork() -> int:
    try:
        return os.fork()
    except OSError:
        return -1


def settle() -> None:
    """Waits for every entry a child is writing."""
    while _pending:
        _wait(_pending.popitem()[1])


def _wait(pid: int) -> None:
    if pid <= 0:
        return
    try:
        _pid, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return
    code = os.waitstatus_to_exitcode(status)
    if 0 < code < _SILENT:  # the errno of the write that failed
        unwritable(cache_dir(), OSError(code, os.strerror(code)))


@overload
def shaped(kind: type[T]) -> Callable[[Any], T]: ...
@overload
def shaped(kind: Any) -> Callable[[Any], Any]: ...
def shaped(kind: Any) -> Callable[[Any], Any]:
    """A loader for ``get``: the value as read when it is JSON of the shape the type
    ``kind`` describes, else ValueError. Types: str, int, float (an int too), bool,
    None, Any, ``list[X]``, ``tuple[X, ...]`` and ``tuple[X, Y]`` (a JSON list),
    ``dict[str, X]``, unions, ``Literal``, and TypedDicts (their required keys there, no
    key they do not name). Nothing is converted: what the caller relies on is checked."""
    fits = _fits(kind)  # a type this cannot read fails here, not as a miss in get

    def load(data: Any) -> Any:
        if not fits(data):
            raise ValueError(f"a cached value not of the shape {kind}")
        return data

    return load


@overload
def check(kind: type[T], data: Any) -> T: ...
@overload
def check(kind: Any, data: Any) -> Any: ...
def check(kind: Any, data: Any) -> Any:
    """``data`` itself when it has the shape of ``kind`` (see ``shaped``), else ValueError."""
    return shaped(kind)(data)


_PLAIN: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), bool: (bool,),
                                       float: (int, float), None: (type(None),),
                                       type(None): (type(None),)}


@functools.cache
def _fits(kind: Any) -> Callable[[Any], bool]:
    """Whether JSON data has the shape of ``kind``, made once per type: an index of a
    large binary has 10^5 entries, so items of a plain type are checked in one loop."""
    if kind is Any:
        return lambda _data: True
    if kind in _PLAIN:
        plain = _PLAIN[kind]
        return lambda data: type(data) in plain
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        options = [_fits(a) for a in args]
        return lambda data: any(f(data) for f in options)
    if origin is typing.Literal:
        return lambda data: any(type(data) is type(a) and data == a for a in args)
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        items = _items(args[0])
        return lambda data: type(data) is list and items(data)
    if origin is tuple:
        each = [_fits(a) for a in args]
        return lambda data: type(data) is list and len(data) == len(each) and all(
            f(x) for f, x in zip(each, data, strict=False))
    if origin is dict:
        keys, values = _items(args[0]), _items(args[1])
        return lambda data: type(data) is dict and keys(data.keys()) and values(data.values())
    if typing.is_typeddict(kind):
        fields = {name: _fits(hint) for name, hint in typing.get_type_hints(kind).items()}
        required = frozenset(kind.__required_keys__)
        return lambda data: type(data) is dict and required <= data.keys() and all(
            name in fields and fields[name](v) for name, v in data.items())
    raise TypeError(f"the cache cannot check a value of type {kind!r}")


def _items(kind: Any) -> Callable[[Iterable[Any]], bool]:
    """Whether every item of an iterable has the shape of ``kind``."""
    if kind in _PLAIN:
        plain = _PLAIN[kind]
        return lambda items: all(type(x) in plain for x in items)
    fits = _fits(kind)
    return lambda items: all(map(fits, items))


def drop(prefix: str) -> None:
    """Forget every answer kept for the builds whose keys start with ``prefix`` (a plan
    that did not hold for its file: nothing else kept with it is trusted either)."""
    import shutil

    if not prefix or "/" in prefix or prefix.startswith("."):
        return
    for entry in (cache_dir() / "dwarf" / _SCHEMA).glob(prefix + "*"):
        shutil.rmtree(entry, ignore_errors=True)
