"""Test programs built once and kept: by a digest of everything that decides their bytes.

A build's key is a digest of its inputs: the sources (every file, by content), the
toolchain (its path and what it says of its version), the flags and environment it
is given, the directory it is built in (debug info records it) and the versions of
the distribution's libraries it may link (client_golang and the Rust crates come
from Debian's packages). A build runs in ``environment``'s variables alone, never the
caller's: a GOFLAGS, RUSTFLAGS, RUSTUP_TOOLCHAIN or CGO_CFLAGS there would change its
bytes unseen by the key. The binary is kept under ``.cache/testprogs/KEY/`` in the
tree (ignored by git), built there under a lock per key and marked done last, so
that parallel workers never see half a binary; every later run, and every
test asking for it, gets a copy of its own (tests rename, rewrite and strip their
copies). ``NOOP_TEST_REBUILD=1`` builds everything again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

from agent.kernel.kheaders import locked
from harness import tiers

REPO = Path(__file__).resolve().parent.parent.parent
KEPT = REPO / ".cache" / "testprogs"
FORMAT = 2  # of the key: a change of what goes into it builds everything again


# Where a build finds the programs a toolchain runs (gcc for cgo, the linker for rustc),
# after each toolchain's own directory (rustup's proxies find each other there).
BASE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


# Where rustup keeps its toolchains and which it runs, when the machine says otherwise
# than its defaults (an image with rustup in /usr/local): a rustc proxy needs them.
RUSTUP = ("RUSTUP_HOME", "RUSTUP_TOOLCHAIN")


def environment(*tools: Path | str, **settings: str) -> dict[str, str]:
    """The whole environment of a build that runs ``tools``: a fixed PATH (their
    directories first), HOME, a C locale, rustup's settings where the machine has them,
    and ``settings``; part of the build's key."""
    dirs = [str(Path(t).parent) for t in tools]
    return {"PATH": ":".join(dict.fromkeys([*dirs, *BASE_PATH])), "HOME": str(Path.home()),
            "LC_ALL": "C.UTF-8", **{k: os.environ[k] for k in RUSTUP if k in os.environ},
            **settings}


@cache
def tool(path: str) -> str:
    """A toolchain's identity: its resolved path and what it says of its version."""
    real = str(Path(path).resolve())
    for flag in ("version", "--version", "-vV"):
        done = subprocess.run([real, flag], capture_output=True, text=True, timeout=60,
                              check=False, env=environment(real))
        if done.returncode == 0 and done.stdout.strip():
            return f"{real}: {done.stdout.strip()}"
    return real


@cache
def packages(pattern: str) -> str:
    """The installed versions of the Debian packages ``pattern`` names (the libraries a
    build takes from the distribution: golang-*, librust-*)."""
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n", pattern],
                          capture_output=True, text=True, timeout=60, check=False)
    return "\n".join(sorted(done.stdout.splitlines()))


def tree(*paths: Path) -> str:
    """A digest of files and directory trees: every file's path and bytes."""
    h = hashlib.sha256()
    for top in paths:
        files = sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else [top]
        for f in files:
            if "target" in f.relative_to(top).parts[:1] or f.name == "Cargo.lock":
                continue  # what a cargo build leaves in its source tree
            h.update(str(f).encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def kept(name: str, inputs: dict[str, object], make: Callable[[Path], None],
         out: Path | None = None) -> Path:
    """The program ``make(dir)`` builds as ``dir/name`` from ``inputs``, built once and
    kept; a copy of it at ``out`` (default: the kept file itself, for reading only)."""
    tiers.guard()
    key = hashlib.sha256(json.dumps({"format": FORMAT, "name": name, **inputs},
                                    sort_keys=True, default=str).encode()).hexdigest()[:32]
    home = KEPT / key
    done = home / ".done"  # written last: a reader without the lock sees all or nothing
    rebuild = bool(os.environ.get("NOOP_TEST_REBUILD"))
    if rebuild or not done.is_file():
        KEPT.mkdir(parents=True, exist_ok=True)
        with locked(KEPT / f"{key}.lock"):
            if rebuild or not done.is_file():
                shutil.rmtree(home, ignore_errors=True)
                home.mkdir(parents=True)  # built where it stays: paths in its debug info
                make(home)
                if not (home / name).is_file():
                    raise RuntimeError(f"building {name} made no {home / name}")
                done.write_text(json.dumps(inputs, sort_keys=True, default=str, indent=1))
    if out is None:
        return home / name
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(home / name, out)
    return out


def go_cache(go: Path) -> Path:
    """The build cache every Go build of one toolchain shares."""
    return REPO / ".cache" / "gocache" / hashlib.sha256(tool(str(go)).encode()
                                                        ).hexdigest()[:16]
