"""Generated C -> compiled BPF: BCC compiles it in a short-lived child process, and what
it made (each function's instructions, which of them name which map, and every map's
definition) is kept on disk, keyed by a hash of the exact C text, BCC's version, the
kernel headers and the running kernel's release. The agent then loads it with its own
``bpfsys`` calls, so neither LLVM nor BCC stays in its memory, and a second start on
the same plan (a restart, a replan to the same build) needs no compiler at all.

An entry carries a digest of itself: a corrupt, truncated or foreign one is compiled
again, never trusted. A changed spec or binary changes the C text, so a stale entry is
never found. ``python -m agent.kernel.compile`` is the child: C text on stdin, the
object as JSON on stdout. The only module that imports ``bcc``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import platform
import re
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from importlib import util
from pathlib import Path
from typing import Any

from agent import cpus
from agent.cache import cache_dir, write_atomic
from agent.errors import NoopError
from agent.kernel import kheaders
from agent.kernel.bpfsys import MapDef

FORMAT = 1  # of a cache entry: a change makes every older entry a miss
KEEP = 256  # entries kept; the least recently used go first
CFLAGS = ["-Wno-unused-variable"]
_LDDW = 0x18  # BPF_LD | BPF_IMM | BPF_DW: a 64-bit immediate, in two instructions
_PSEUDO_MAP_FD = 1


class CompileError(NoopError):
    """BCC could not compile the generated C, or no kernel headers for it."""


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    insns: bytes
    maps: tuple[tuple[int, str], ...]  # (instruction index of a lddw, the map it names)


@dataclass(frozen=True, slots=True)
class Compiled:
    license: str
    kern_version: int
    maps: tuple[MapDef, ...]
    functions: dict[str, Function]
    cached: bool = False  # found in the cache: no compiler ran

    def to_json(self) -> dict[str, object]:
        return {"license": self.license, "kern_version": self.kern_version,
                "maps": [[m.name, m.type, m.key_size, m.value_size, m.max_entries, m.flags]
                         for m in self.maps],
                "functions": {f.name: {"insns": base64.b64encode(f.insns).decode(),
                                       "maps": [list(m) for m in f.maps]}
                              for f in self.functions.values()}}

    @classmethod
    def from_json(cls, d: Any, cached: bool = False) -> Compiled:
        """The object ``to_json`` made; ValueError (or KeyError, TypeError) if not one."""
        maps = tuple(MapDef(str(n), *(int(x) for x in rest)) for n, *rest in d["maps"])
        names = {m.name for m in maps}
        fns = {}
        for name, f in d["functions"].items():
            insns = base64.b64decode(f["insns"], validate=True)
            refs = tuple((int(i), str(m)) for i, m in f["maps"])
            if not insns or len(insns) % 8 or any(
                    m not in names or not 0 <= i < len(insns) // 8 - 1 for i, m in refs):
                raise ValueError(f"function {name} does not fit its maps")
            fns[str(name)] = Function(str(name), insns, refs)
        return cls(str(d["license"]), int(d["kern_version"]), maps, fns, cached)


def bcc_version() -> str:
    """The distribution's BCC version, read without importing it (which maps LLVM)."""
    spec = util.find_spec("bcc")
    if spec is None or not spec.submodule_search_locations:
        return "missing"
    for where in spec.submodule_search_locations:
        try:
            text = (Path(where) / "version.py").read_text()
        except OSError:
            continue
        found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
        if found:
            return found.group(1)
    return "unknown"


# Where the dynamic loader finds libbcc and the LLVM it links (Debian's multiarch folder
# first): the compiler inside BCC is LLVM's, updated apart from BCC itself.
_MULTIARCH = getattr(sys.implementation, "_multiarch", "")
_LIBRARY_DIRS = ((f"/usr/lib/{_MULTIARCH}",) if _MULTIARCH else ()) + ("/usr/lib64", "/usr/lib")
_COMPILER_LIBRARIES = re.compile(r"lib(bcc|LLVM.*|clang-cpp.*|clang)\.so.*")


@functools.cache
def _bcc_build() -> str:
    """Which build of BCC compiles: its version, its Python files' stamps (Debian
    rebuilds BCC against a new LLVM without a new version; python3-bpfcc and libbpfcc
    come from one source package, so a rebuild of one installs the other again), and
    the stamps of libbcc and the LLVM and clang libraries beside it. Read once a process:
    an upgrade is seen by the next start."""
    spec = util.find_spec("bcc")
    package = (spec.submodule_search_locations or []) if spec is not None else []
    files = [Path(where) / name for where in package
             for name in ("__init__.py", "version.py", "libbcc.py")]
    for folder in _LIBRARY_DIRS:
        with contextlib.suppress(OSError):
            files += sorted(Path(e.path) for e in os.scandir(folder)
                            if _COMPILER_LIBRARIES.fullmatch(e.name))
    stamps = []
    for path in files:
        with contextlib.suppress(OSError):
            st = path.stat()
            stamps.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    return " ".join([bcc_version(), *stamps])


def _key(text: str, headers: str) -> str:
    """What decides the compiled program: the C text and how it is compiled (flags),
    by which BCC, against which kernel headers, for which kernel."""
    h = hashlib.sha256()
    for part in (str(FORMAT), _bcc_build(), platform.release(), headers, " ".join(CFLAGS),
                 text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _entry(key: str) -> Path:
    return cache_dir() / "bpf" / f"{key[:32]}.json"


def _headers() -> str:
    """Which kernel headers BCC compiles against (part of the key: they shape the
    compiled code): BCC_KERNEL_SOURCE, else the running kernel's own tree, each by
    ``kheaders.identity``, so that headers installed or merged again are another key."""
    where = os.environ.get(kheaders.ENV_VAR) or f"/lib/modules/{platform.release()}/build"
    return kheaders.identity(Path(where))


def cached(text: str) -> Compiled | None:
    """The compiled program for ``text`` from the cache; None when absent or not sound."""
    if os.environ.get("NOOP_NO_CACHE"):
        return None
    key = _key(text, _headers())
    path = _entry(key)
    try:
        raw = path.read_bytes()
        wrapper = json.loads(raw)
        body = wrapper["body"]
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if wrapper.get("key") != key or wrapper.get("sha256") != digest:
            return None
        got = Compiled.from_json(body, cached=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: kept longest
    return got


def store(text: str, compiled: Compiled) -> None:
    """Keep ``compiled`` for ``text``; a cache that cannot be written is skipped."""
    if os.environ.get("NOOP_NO_CACHE"):
        return
    key = _key(text, _headers())
    path = _entry(key)
    body = compiled.to_json()
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    data = json.dumps({"key": key, "sha256": digest, "body": body},
                      separators=(",", ":")).encode()
    if write_atomic(path, data):
        with contextlib.suppress(OSError):
            _prune(path.parent)


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP:]:
        old.unlink(missing_ok=True)


def compile_c(text: str, what: str = "compiling",
              progress: Callable[[str], None] | None = None) -> Compiled:
    """The compiled program for ``text``: from the cache, else from BCC in a child
    process (then cached); ``progress`` hears ``what`` when the compiler runs."""
    kheaders.ensure_bcc_env()
    got = cached(text)
    if got is not None:
        return got
    if progress is not None:
        progress(what)
    source = kheaders.find_headers()
    if not source.usable:
        raise CompileError(f"no kernel headers for BCC: {source.detail}",
                           kheaders.INSTALL_HINT + "; then run 'noop headers'")
    compiled = in_child(text)
    store(text, compiled)
    return compiled


def in_child(text: str, ways: int | None = None) -> Compiled:
    """BCC's compile of ``text``, in child processes: one for each CPU noop may use
    (``ways``: this many), each compiling every declaration and its share of the
    programs. clang compiles each function alone, so the parts' functions are the
    whole's, instruction for instruction; parts that disagree on anything else, or an
    error, are compiled again whole (whose message then names the whole text)."""
    kheaders.ensure_bcc_env()  # the children find the headers BCC needs through it
    parts = split(text, ways if ways is not None else _ways(text))
    if len(parts) > 1:
        with ThreadPoolExecutor(len(parts)) as pool:
            made = list(pool.map(_answer, parts))
        merged = _merged(made)
        if merged is not None:
            return merged
    got = _answer(text)
    if isinstance(got, CompileError):
        raise got
    return got


_PROGRAM = re.compile(r"(?ms)^int \w+\(struct pt_regs \*ctx\)\n\{\n.*?^\}\n")
# A child's start (~0.35 s: Python, BCC, clang and its headers) is worth it for a share
# of at least this many programs, or of this many lines of them (clang's work grows
# with them: the client_golang preset's four programs of 250 lines took 1.30 s in one
# compiler and 1.08 s in two).
SHARE = 4
SHARE_LINES = 400


def split(text: str, ways: int) -> list[str]:
    """``text`` as up to ``ways`` texts, each with every line outside the programs (the
    headers, maps, types and inline helpers) and a share of the programs, balanced by
    length; ``[text]`` when it has too few programs, and too few lines of them, for two
    parts (``SHARE``, ``SHARE_LINES``)."""
    programs = list(_PROGRAM.finditer(text))
    lines = sum(m.group().count("\n") for m in programs)
    ways = min(ways, max(len(programs) // SHARE, lines // SHARE_LINES))
    if ways < 2:
        return [text]
    load = [0] * ways
    owner = {}
    for m in sorted(programs, key=lambda m: m.end() - m.start(), reverse=True):
        k = load.index(min(load))
        owner[m.start()] = k
        load[k] += m.end() - m.start()
    parts: list[list[str]] = [[] for _ in range(ways)]
    last = 0
    for m in programs:
        between = text[last:m.start()]
        for k, part in enumerate(parts):
            part.append(between + m.group() if owner[m.start()] == k else between)
        last = m.end()
    return ["".join(part) + text[last:] for part in parts]


def _ways(text: str) -> int:
    """Children worth starting: one per CPU noop may use, at most 4 (each holds LLVM:
    ~100 MB)."""
    return cpus.usable(4)


def _merged(made: list[Compiled | CompileError]) -> Compiled | None:
    """The parts' programs as one compile, when every part compiled and they agree on
    license, kernel version and maps; None otherwise."""
    first = made[0]
    if not isinstance(first, Compiled):
        return None
    functions: dict[str, Function] = {}
    for part in made:
        if not isinstance(part, Compiled) or (part.license, part.kern_version, part.maps) \
                != (first.license, first.kern_version, first.maps):
            return None
        for name, f in part.functions.items():
            if functions.setdefault(name, f) != f:
                return None
    return replace(first, functions=functions)


def _answer(text: str) -> Compiled | CompileError:
    """What a child made of ``text``, or why it made nothing."""
    try:
        done = subprocess.run([sys.executable, "-m", "agent.kernel.compile"],
                              input=text.encode(), capture_output=True, timeout=600,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CompileError(f"could not run BCC's compiler: {exc}", "run 'noop doctor'")
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        why = (said[-1] if said else f"killed by signal {-done.returncode}"
               if done.returncode < 0 else f"exit {done.returncode}")
        return CompileError(f"BCC's compiler stopped: {why}", "run 'noop doctor'")
    if "error" in answer:
        return CompileError(answer["error"], answer.get("hint", ""))
    try:
        return Compiled.from_json(answer)
    except (ValueError, KeyError, TypeError) as exc:
        return CompileError(f"BCC's compiler said what noop cannot read: {exc}",
                            "run 'noop doctor'")


# --- the child: BCC compiles, and says what it made ----------------------------------

def _child(text: str) -> Compiled:
    import ctypes

    import bcc  # the distribution's BCC; never the PyPI project of that name

    lib = bcc.lib
    for fn, res, args in (("bpf_num_tables", ctypes.c_ulonglong, [ctypes.c_void_p]),
                          ("bpf_table_name", ctypes.c_char_p,
                           [ctypes.c_void_p, ctypes.c_ulonglong]),
                          ("bpf_table_fd_id", ctypes.c_int,
                           [ctypes.c_void_p, ctypes.c_ulonglong]),
                          ("bpf_table_key_size_id", ctypes.c_size_t,
                           [ctypes.c_void_p, ctypes.c_ulonglong]),
                          ("bpf_table_leaf_size_id", ctypes.c_size_t,
                           [ctypes.c_void_p, ctypes.c_ulonglong])):
        getattr(lib, fn).restype = res
        getattr(lib, fn).argtypes = args
    err = _silence_stderr()
    try:
        b = bcc.BPF(text=text.encode(), cflags=CFLAGS)
    except Exception as exc:
        said = _first_error(err) or str(exc)
        raise CompileError(f"BCC could not compile the generated program: {said}",
                           "run 'noop doctor'; 'noop check --emit-c' shows the C") from None
    m = b.module
    maps, by_fd = [], {}
    for i in range(lib.bpf_num_tables(m)):
        name = lib.bpf_table_name(m, i).decode()
        maps.append(MapDef(name, lib.bpf_table_type_id(m, i), lib.bpf_table_key_size_id(m, i),
                           lib.bpf_table_leaf_size_id(m, i),
                           lib.bpf_table_max_entries_id(m, i), lib.bpf_table_flags_id(m, i)))
        by_fd[lib.bpf_table_fd_id(m, i)] = name
    functions = {}
    for i in range(lib.bpf_num_functions(m)):
        name = lib.bpf_function_name(m, i)
        start, size = lib.bpf_function_start(m, name), lib.bpf_function_size(m, name)
        insns = bytes((ctypes.c_uint8 * size).from_address(start))
        refs = []
        for n in range(size // 8 - 1):
            op, regs, _off, imm = struct.unpack_from("<BBhi", insns, n * 8)
            if op == _LDDW and regs >> 4 == _PSEUDO_MAP_FD:
                if imm not in by_fd:
                    raise CompileError(f"BCC's code of {name.decode()} names an unknown map",
                                       "run 'noop doctor'")
                refs.append((n, by_fd[imm]))
        functions[name.decode()] = Function(name.decode(), insns, tuple(refs))
    return Compiled(lib.bpf_module_license(m).decode(), lib.bpf_module_kern_version(m),
                    tuple(maps), functions)


def _silence_stderr() -> Path:
    """BCC's compiler writes to fd 2: keep that in a file, for the error message."""
    fd, name = tempfile.mkstemp(prefix="noop-bcc-")
    os.unlink(name)
    os.dup2(fd, 2)
    return Path(f"/proc/self/fd/{fd}")


def _first_error(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    errors = [line for line in text.splitlines() if "error:" in line]
    return errors[0].split("error:", 1)[1].strip() if errors else ""


def main() -> int:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's ^C: it stops us itself
    text = sys.stdin.read()
    started = time.monotonic()
    try:
        out: dict[str, object] = _child(text).to_json()
        out["seconds"] = round(time.monotonic() - started, 3)
    except NoopError as exc:
        out = {"error": exc.message, "hint": exc.hint}
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
