"""Find kernel headers BCC can compile against, or merge Debian's split trees. Imports only
the standard library and ``agent.files``: the image's base runs it with a bare python3
(deploy/image/install.sh), and tests/test_steps.py holds it to that."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.files import cache_dir

ENV_VAR = "BCC_KERNEL_SOURCE"
MARKER = ".noop-merged"
INSTALL_HINT = "apt-get install linux-headers-amd64"

USR_SRC = Path("/usr/src")
LIB_MODULES = Path("/lib/modules")
# CONFIG_IKHEADERS: the running kernel carries its own headers; BCC unpacks
# them by itself when /lib/modules/REL/build is missing.
IKHEADERS = Path("/sys/kernel/kheaders.tar.xz")

# Debian and Ubuntu name header flavours after the architecture.
_FLAVOUR_OF_MACHINE = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True, slots=True)
class HeaderSource:
    """What BCC can use for kernel headers on this machine.

    kind is one of:
      env        BCC_KERNEL_SOURCE is already set (path is its value);
      modules    /lib/modules/REL/build of the running kernel;
      ikheaders  the kernel's built-in /sys/kernel/kheaders.tar.xz;
      merged     a merged Debian tree prepared earlier in noop's cache;
      mergeable  Debian -common and -<flavour> trees that can be merged;
      none       nothing usable.
    usable says whether BCC can compile with it as things stand now.
    """

    kind: str
    path: Path | None
    detail: str
    usable: bool


@dataclass(frozen=True, slots=True)
class DebianPair:
    """A flavour header tree and the common tree it refers to."""

    name: str  # e.g. "6.1.0-56-amd64", also the merged directory's name
    flavour_dir: Path
    common_dir: Path


def default_cache_dir() -> Path:
    """noop's cache directory (one for everything noop caches)."""
    return cache_dir()


def looks_like_kernel_tree(path: Path) -> bool:
    """True if path has what BCC's include flags point into."""
    return (path / "include").is_dir() and (
        (path / "arch").is_dir() or (path / "Makefile").is_file()
    )


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name))


def debian_pairs(usr_src: Path | None = None, machine: str | None = None) -> tuple[DebianPair, ...]:
    """Header flavour trees with their common tree, newest version first.

    Debian ships linux-headers-VER-common beside linux-headers-VER-amd64;
    Ubuntu ships linux-headers-VER beside linux-headers-VER-generic.
    """
    usr_src = usr_src or USR_SRC
    flavour = _FLAVOUR_OF_MACHINE.get(machine or platform.machine(), "")
    try:
        entries = sorted(p for p in usr_src.iterdir() if p.is_dir())
    except OSError:
        return ()
    found: list[tuple[tuple[bool, tuple[int, ...]], DebianPair]] = []
    for tree in entries:
        m = re.fullmatch(r"linux-headers-(\d[\w.+~]*?-\d+)-([\w-]+)", tree.name)
        if not m or m.group(2) == "common":
            continue
        version, tree_flavour = m.groups()
        if flavour and not tree_flavour.endswith((flavour, "generic")):
            continue
        for common_name in (f"linux-headers-{version}-common", f"linux-headers-{version}"):
            common = usr_src / common_name
            if looks_like_kernel_tree(common) and (tree / "include").is_dir():
                pair = DebianPair(tree.name.removeprefix("linux-headers-"), tree, common)
                # Prefer the plain flavour (amd64) to cloud/rt, then the newest.
                found.append(((tree_flavour == flavour, _version_key(version)), pair))
                break
    found.sort(key=lambda item: item[0], reverse=True)
    return tuple(pair for _, pair in found)


def _stamps(*paths: Path) -> str:
    """A digest of what the files at ``paths`` say of themselves (size, modification
    time): a package's files installed again, or a tree merged again, are new stamps."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _fingerprint(pair: DebianPair) -> str:
    """Changes when either source tree is reinstalled or upgraded."""
    return _stamps(pair.common_dir / "Makefile",
                   pair.flavour_dir / "include" / "generated" / "autoconf.h",
                   pair.flavour_dir / "include" / "generated" / "utsrelease.h")


def _merger() -> str:
    """This module's own text: a merge made by other code is made again."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _marker_text(pair: DebianPair) -> str:
    return (f"common={pair.common_dir}\nflavour={pair.flavour_dir}\n"
            f"fingerprint={_fingerprint(pair)}\nmerger={_merger()}\n")


def identity(tree: Path) -> str:
    """Which headers a tree at ``tree`` is, for keys of what is compiled against it: its
    path, noop's marker where noop merged it, and the stamps of its version files (a
    tree installed or merged again at the same path is another identity)."""
    try:
        marker = (tree / MARKER).read_text()
    except OSError:
        marker = ""
    generated = tree / "include" / "generated"
    return "\n".join((str(tree), marker, _stamps(
        tree / "Makefile", generated / "autoconf.h", generated / "utsrelease.h",
        generated / "uapi" / "linux" / "version.h")))


def _merged_is_current(merged: Path, pair: DebianPair | None) -> bool:
    """A merge is usable once its marker exists; stale if its sources changed."""
    try:
        text = (merged / MARKER).read_text()
    except OSError:
        return False
    if pair is None or not pair.flavour_dir.is_dir():
        return True  # sources removed since: the merged copy stands alone
    return text == _marker_text(pair)


def _cached_trees(cache_dir: Path) -> tuple[Path, ...]:
    root = cache_dir / "kernel-headers"
    try:
        trees = [p for p in root.iterdir() if (p / MARKER).is_file()]
    except OSError:
        return ()
    return tuple(sorted(trees, key=lambda p: _version_key(p.name), reverse=True))


def find_headers(
    release: str | None = None,
    *,
    cache_dir: Path | None = None,
    usr_src: Path | None = None,
    lib_modules: Path | None = None,
    ikheaders: Path | None = None,
) -> HeaderSource:
    """Describe the best kernel headers BCC could use for this kernel."""
    release = release or platform.release()
    lib_modules = lib_modules or LIB_MODULES
    ikheaders = ikheaders or IKHEADERS
    env = os.environ.get(ENV_VAR)
    if env:
        ok = looks_like_kernel_tree(Path(env))
        detail = f"{ENV_VAR}={env}" + ("" if ok else " has no include/ and arch/")
        return HeaderSource("env", Path(env), detail, ok)
    build = lib_modules / release / "build"
    if looks_like_kernel_tree(build):
        return HeaderSource("modules", build, f"headers for {release}", True)
    if ikheaders.is_file():
        return HeaderSource("ikheaders", ikheaders, "built into the kernel", True)
    pairs = debian_pairs(usr_src)
    cache = cache_dir or default_cache_dir()
    for pair in pairs:
        merged = cache / "kernel-headers" / pair.name
        if _merged_is_current(merged, pair):
            return HeaderSource("merged", merged, _mismatch(pair.name, release), True)
    if pairs:
        pair = pairs[0]
        detail = f"{pair.flavour_dir.name} installed, not merged yet"
        return HeaderSource("mergeable", pair.flavour_dir, detail, False)
    for merged in _cached_trees(cache):
        return HeaderSource("merged", merged, _mismatch(merged.name, release), True)
    return HeaderSource("none", None, f"no kernel headers for {release}", False)


def _mismatch(name: str, release: str) -> str:
    if name == release:
        return "merged"
    return f"merged {name}; kernel is {release}: fine for uprobes"


def prepare_headers(cache_dir: Path | None = None, *, usr_src: Path | None = None) -> Path:
    """Merge the newest Debian header pair into the cache; return its path.

    Idempotent: a current merge is returned as is. Raises LookupError when
    no header packages are installed and OSError when the cache is not
    writable. /lib/modules is never touched.
    """
    pairs = debian_pairs(usr_src)
    if not pairs:
        raise LookupError(f"no linux-headers-* trees in {usr_src or USR_SRC}")
    pair = pairs[0]
    root = (cache_dir or default_cache_dir()) / "kernel-headers"
    final = root / pair.name
    if _merged_is_current(final, pair):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / ".lock"):
        if _merged_is_current(final, pair):
            return final  # another process merged while we waited
        for leftover in root.glob(f".{pair.name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)  # from a killed run
        staging = Path(tempfile.mkdtemp(prefix=f".{pair.name}.", dir=root))
        staging.chmod(0o755)  # mkdtemp makes it private; headers are not
        try:
            sources = (pair.common_dir, pair.flavour_dir)
            _copy_tree(pair.common_dir, staging, sources, staging)
            _copy_tree(pair.flavour_dir, staging, sources, staging)
            # The marker goes in last: a tree without it is never used.
            (staging / MARKER).write_text(_marker_text(pair))
            _install(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file at ``path`` (made if missing) for the block:
    one process at a time builds what the lock stands for."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _install(staging: Path, final: Path) -> None:
    """Rename staging into place, moving a stale or half-done tree aside."""
    old: Path | None = None
    if final.exists() or final.is_symlink():
        old = final.with_name(f".{final.name}.old")
        _remove(old)
        os.rename(final, old)
    os.rename(staging, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _copy_tree(src: Path, dst: Path, sources: Sequence[Path], top: Path) -> None:
    """Copy src over dst; symlinks into any source tree become in-tree links."""
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        out = dst / here.relative_to(src)
        if out.is_symlink():
            out.unlink()  # never write through a link out of the tree
        out.mkdir(exist_ok=True)
        for name in list(dirnames):
            if (here / name).is_symlink():
                dirnames.remove(name)
                _copy_link(here / name, out / name, sources, top)
        for name in filenames:
            item = here / name
            if item.is_symlink():
                _copy_link(item, out / name, sources, top)
            elif not _is_include_wrapper(item, sources):
                _remove(out / name)
                shutil.copy2(item, out / name)


def _is_include_wrapper(path: Path, sources: Sequence[Path]) -> bool:
    """Debian's flavour Makefile only includes the common one: keep the latter."""
    if path.name != "Makefile" or path.stat().st_size > 512:
        return False
    text = path.read_text(errors="replace").strip()
    return any(text == f"include {s}/Makefile" for s in sources)


def _copy_link(link: Path, out: Path, sources: Sequence[Path], top: Path) -> None:
    target = Path(os.path.realpath(link))
    inside = _relative_to_any(target, sources)
    if inside is not None:
        mapped = top / inside
        if mapped == out:
            return  # points at its twin in the common tree: already copied
        if out.is_dir() and not out.is_symlink() and target.is_dir():
            _copy_tree(target, out, sources, top)
            return
        _remove(out)
        out.symlink_to(os.path.relpath(mapped, out.parent))
        return
    # Outside both trees (scripts/, tools/ in linux-kbuild): keep it absolute
    # so the link still resolves from the cache.
    _remove(out)
    out.symlink_to(target)


def _relative_to_any(path: Path, roots: Iterable[Path]) -> Path | None:
    for root in roots:
        real_root = Path(os.path.realpath(root))
        if path == real_root or real_root in path.parents:
            return path.relative_to(real_root)
    return None


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def ensure_bcc_env(cache_dir: Path | None = None) -> str | None:
    """Point BCC_KERNEL_SOURCE at usable headers when BCC would find none.

    Call before importing bcc. Leaves an existing setting alone, does
    nothing when the running kernel has its own headers, and merges the
    Debian trees on first use when they are installed. Returns the path
    now in BCC_KERNEL_SOURCE, or None when it was not set here.
    """
    if os.environ.get(ENV_VAR):
        return None
    source = find_headers(cache_dir=cache_dir)
    if source.kind == "merged" and source.path is not None:
        path = source.path
    elif source.kind == "mergeable":
        try:
            path = prepare_headers(cache_dir)
        except LookupError:
            return None
        except OSError as exc:  # the cache cannot hold them: merged for this run only
            from agent import cache  # not at the top: the image's base runs this module
            cache.unwritable(cache_dir or default_cache_dir(), exc)
            try:
                path = prepare_headers(cache.private())
            except (OSError, LookupError):
                return None
    else:
        return None
    os.environ[ENV_VAR] = str(path)
    return str(path)


def main_prepare(argv: Sequence[str] | None = None) -> int:
    """`noop headers`: merge headers if needed and print where they are."""
    del argv  # no options yet
    source = find_headers()
    if source.kind in ("env", "modules", "ikheaders") and source.usable:
        print(f"kernel headers: {source.path} ({source.detail})")
        return 0
    try:
        path = prepare_headers()
    except LookupError:
        print(f"error: no kernel headers found; fix: {INSTALL_HINT}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot write merged headers: {exc}", file=sys.stderr)
        return 1
    print(f"kernel headers: {path} ({find_headers().detail})")
    return 0
