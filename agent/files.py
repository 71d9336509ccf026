"""Files a user names (a spec, a binary, a debug file, a web config, the cache's
directory), checked in one place: every OS error on the way to one, and every file that
is not a regular file (a directory, a FIFO, a socket, a device), is one line that names
the file and what is wrong, never a traceback; and reads are bounded, so that a FIFO,
``/dev/zero`` or a huge sparse file is refused, never waited for or read to the end.
And a file's digest (``digest``), what the cache tells versions of a binary apart by,
and where the cache is (``cache_dir``). Imports nothing outside the standard library but
noop's own leaves: the image's base merges kernel headers with its bare python3."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from collections.abc import Mapping
from pathlib import Path

from agent import cpus
from agent.errors import NoopError

MAX_TEXT = 16 << 20  # bytes of a spec or a web config read at most
MAX_BINARY = 8 << 30  # bytes of a binary or debug file noop reads at most

_WHY = {errno.ENOENT: "no such file", errno.EACCES: "permission denied",
        errno.EPERM: "permission denied", errno.ELOOP: "a loop of symbolic links",
        errno.ENAMETOOLONG: "its name is too long", errno.EISDIR: "is a directory",
        errno.ENOTDIR: "a part of its path is not a directory",
        errno.ENXIO: "no device behind it", errno.EIO: "an input/output error"}
_KINDS = ((stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "is a FIFO (a named pipe)"),
          (stat.S_ISSOCK, "is a socket"), (stat.S_ISCHR, "is a character device"),
          (stat.S_ISBLK, "is a block device"))


def why(exc: OSError) -> str:
    """What an OS error says of a file, in a few words."""
    if exc.errno in _WHY:
        return _WHY[exc.errno]
    return (exc.strerror or str(exc)).lower()


def problem(path: str | os.PathLike[str], exc: OSError, hint: str = "check the path",
            error: type[NoopError] = NoopError) -> NoopError:
    """The one-line error for ``exc`` on the file at ``path``."""
    err = error(f"{path}: {why(exc)}", hint)
    err.exit_code = 2
    return err


def kind(path: str | os.PathLike[str]) -> str:
    """What the file at ``path`` is when it is not a regular file (``is a FIFO (a named
    pipe)``), else ''."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return ""
    return next((said for test, said in _KINDS if test(mode)), "")


def checked(path: str | os.PathLike[str], what: str, limit: int = MAX_BINARY,
            error: type[NoopError] = NoopError, hint: str = "",
            hints: Mapping[int, str] | None = None) -> os.stat_result:
    """The status of the regular file at ``path`` (links followed), no larger than
    ``limit``; else ``error``, one line: ``PATH: why (hint)``, exit code 2. ``hints``:
    the hint for an OS error by its errno, where the caller knows a better one."""
    try:
        st = os.stat(path)
    except OSError as exc:
        said = (hints or {}).get(exc.errno or 0) or hint or f"check the path of the {what}"
        raise problem(path, exc, said, error) from None
    except ValueError:  # a NUL in the name
        err = error(f"{path!r}: not a file name", f"check the path of the {what}")
        err.exit_code = 2
        raise err from None
    for test, said in _KINDS:
        if test(st.st_mode):
            err = error(f"{path}: {said}", hint or f"name the {what} itself")
            err.exit_code = 2
            raise err
    if st.st_size > limit:
        err = error(f"{path}: {st.st_size} bytes, more than a {what} noop reads "
                    f"({limit >> 20} MiB)", hint or f"check that this is the {what}")
        err.exit_code = 2
        raise err
    return st


def resolved(path: str | os.PathLike[str], what: str) -> str:
    """``path`` made absolute, its links followed as far as they go; a loop of links or
    an unusable name is one line."""
    try:
        return str(Path(path).resolve())
    except RuntimeError:  # Python 3.11's Path.resolve on a loop of symbolic links
        raise problem(path, OSError(errno.ELOOP, "loop"), f"check the path of the {what}"
                      ) from None
    except OSError as exc:
        raise problem(path, exc, f"check the path of the {what}") from None


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether anything is at ``path`` (a dangling link counts); an unusable name or an
    unreadable directory on the way does not say no: ``checked`` says what it is."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return True


def read_text(path: str | os.PathLike[str], what: str, limit: int = MAX_TEXT,
              error: type[NoopError] = NoopError) -> str:
    """The UTF-8 text of the regular file at ``path``, read to at most ``limit`` bytes;
    else ``error``, one line."""
    checked(path, what, limit, error)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise problem(path, exc, f"check the path of the {what}", error) from None
    if len(data) > limit:  # it grew since it was looked at
        err = error(f"{path}: more than a {what} noop reads ({limit >> 20} MiB)",
                    f"check that this is the {what}")
        err.exit_code = 2
        raise err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        err = error(f"{path}: not UTF-8 text (byte {exc.start})", f"a {what} is plain text")
        err.exit_code = 2
        raise err from None


PIECE = 16 << 20  # bytes of a file hashed alone (``digest``)


def digest(path: str | os.PathLike[str]) -> str:
    """SHA-512 of the SHA-512s of the file's 16 MB pieces, in order, and its size; the
    pieces hashed by as many threads as noop may use CPUs (hashlib lets go of the
    interpreter while it hashes), since a cold start of a 130 MB binary waited 0.34 s
    for one SHA-256. The answer does not depend on how many threads there were, or
    whether any could start (this thread hashes what none did). Every thread is
    joined before it returns or raises (a walk of DWARF forks only a one-thread
    process); a file that is not a regular one, or that shrinks while read, is an
    OSError naming it."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
                          "not a regular file", str(path))
        size = st.st_size
        digests: list[bytes | None] = [None] * -(-size // PIECE)
        failed: list[BaseException] = []

        def piece(i: int, buf: memoryview) -> bytes:
            h, at, end = hashlib.sha512(), i * PIECE, min((i + 1) * PIECE, size)
            while at < end:
                got = os.preadv(fd, [buf[:min(len(buf), end - at)]], at)
                if got == 0:
                    raise OSError(errno.EIO, "the file shrank while it was read", str(path))
                h.update(buf[:got])
                at += got
            return h.digest()

        def hash_every(first: int, step: int) -> None:
            buf = memoryview(bytearray(1 << 20))
            try:
                for i in range(first, len(digests), step):
                    if failed:
                        return
                    digests[i] = piece(i, buf)
            except BaseException as e:  # raised in the caller's thread, after the joins
                failed.append(e)

        ways = max(1, min(cpus.usable(4), len(digests)))
        helpers: list[threading.Thread] = []
        try:
            for k in range(1, ways):
                t = threading.Thread(target=hash_every, args=(k, ways), daemon=True)
                t.start()  # RuntimeError: none can start now; hashed below
                helpers.append(t)
        except RuntimeError:
            pass
        try:
            hash_every(0, ways)
        finally:
            for t in helpers:
                t.join()
        if failed:
            raise failed[0]
        buf = memoryview(bytearray(1 << 20))
        whole = b"".join(d if d is not None else piece(i, buf) for i, d in enumerate(digests))
    finally:
        os.close(fd)
    return hashlib.sha512(whole + size.to_bytes(8, "little")).hexdigest()[:16]


def cache_dir() -> Path:
    """``$NOOP_CACHE_DIR``, else /var/cache/noop for root, else the XDG cache."""
    env = os.environ.get("NOOP_CACHE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/noop")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "noop"
