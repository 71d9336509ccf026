"""Tests for agent.kheaders: finding and merging kernel headers for BCC."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.kernel import kheaders
from agent.kernel.kheaders import MARKER, find_headers, prepare_headers

VERSION = "6.1.0-56"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the real environment variable or cache by accident."""
    # set, then delete: monkeypatch then restores whatever was there before,
    # even when the code under test sets the variable itself
    monkeypatch.setenv(kheaders.ENV_VAR, "unset-by-test")
    monkeypatch.delenv(kheaders.ENV_VAR)
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / "default-cache"))
    monkeypatch.setattr("platform.machine", lambda: "x86_64")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_debian(root: Path) -> tuple[Path, Path, Path]:
    """A small copy of Debian's split layout: usr/src, -common, -amd64, kbuild."""
    usr_src = root / "usr" / "src"
    common = usr_src / f"linux-headers-{VERSION}-common"
    flavour = usr_src / f"linux-headers-{VERSION}-amd64"
    kbuild = root / "usr" / "lib" / "linux-kbuild-6.1"
    _write(kbuild / "scripts" / "Makefile.build", "# kbuild\n")
    _write(common / "Makefile", "VERSION = 6\nPATCHLEVEL = 1\n")
    _write(common / "include" / "linux" / "sched.h", "/* sched */\n")
    _write(common / "include" / "dt-bindings" / "input" / "codes.h", "/* codes */\n")
    (common / "include" / "dt-bindings" / "linux-codes.h").symlink_to("input/codes.h")
    _write(common / "arch" / "x86" / "include" / "asm" / "ptrace.h", "/* ptrace */\n")
    (common / "scripts").symlink_to(os.path.relpath(kbuild / "scripts", common))
    _write(flavour / "Makefile", f"include {common}/Makefile\n")
    _write(flavour / ".config", "CONFIG_UPROBES=y\n")
    _write(flavour / "include" / "generated" / "autoconf.h", "#define CONFIG_X86 1\n")
    _write(flavour / "include" / "generated" / "utsrelease.h", f'"{VERSION}-amd64"\n')
    _write(flavour / "arch" / "x86" / "include" / "generated" / "asm" / "x.h", "/* gen */\n")
    (flavour / "scripts").symlink_to(os.path.relpath(kbuild / "scripts", flavour))
    # A link from the flavour tree into the common tree (Ubuntu does this a lot).
    (flavour / "include" / "sched-link.h").symlink_to(
        os.path.relpath(common / "include" / "linux" / "sched.h", flavour / "include")
    )
    return usr_src, common, flavour


def test_merge_copies_common_then_flavour(tmp_path: Path) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    merged = prepare_headers(tmp_path / "cache", usr_src=usr_src)

    assert merged == tmp_path / "cache" / "kernel-headers" / f"{VERSION}-amd64"
    assert (merged / MARKER).is_file()
    assert (merged / "include" / "linux" / "sched.h").read_text() == "/* sched */\n"
    assert (merged / "include" / "generated" / "autoconf.h").is_file()
    assert (merged / "arch" / "x86" / "include" / "asm" / "ptrace.h").is_file()
    assert (merged / "arch" / "x86" / "include" / "generated" / "asm" / "x.h").is_file()
    # The flavour Makefile only includes the common one: the real one is kept.
    assert (merged / "Makefile").read_text().startswith("VERSION = 6")
    # No staging or lock leftovers beside the result.
    siblings = sorted(p.name for p in merged.parent.iterdir())
    assert siblings == [".lock", f"{VERSION}-amd64"]


def test_merge_resolves_symlinks(tmp_path: Path) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    merged = prepare_headers(tmp_path / "cache", usr_src=usr_src)

    # In-tree links stay relative and resolve inside the merged tree.
    inner = merged / "include" / "dt-bindings" / "linux-codes.h"
    assert inner.is_symlink() and not os.readlink(inner).startswith("/")
    assert inner.read_text() == "/* codes */\n"
    # A flavour link into the common tree now points into the merged tree.
    link = merged / "include" / "sched-link.h"
    assert Path(os.path.realpath(link)) == (merged / "include" / "linux" / "sched.h").resolve()
    # Links out of both trees (kbuild scripts) become absolute.
    scripts = merged / "scripts"
    assert os.readlink(scripts).startswith("/")
    assert (scripts / "Makefile.build").is_file()


def test_merged_tree_survives_source_removal(tmp_path: Path) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    merged = prepare_headers(tmp_path / "cache", usr_src=usr_src)
    shutil.rmtree(usr_src)
    assert (merged / "Makefile").read_text().startswith("VERSION = 6")
    found = find_headers(
        "6.18.0-test", cache_dir=tmp_path / "cache", usr_src=usr_src, **_no_kernel(tmp_path)
    )
    assert (found.kind, found.path, found.usable) == ("merged", merged, True)


def _no_kernel(tmp_path: Path) -> dict[str, Path]:
    return {"lib_modules": tmp_path / "no-modules", "ikheaders": tmp_path / "no-kheaders"}


def test_prepare_is_idempotent(tmp_path: Path) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    first = prepare_headers(tmp_path / "cache", usr_src=usr_src)
    stamp = (first / MARKER).stat().st_mtime_ns
    (first / "include" / "noop-was-here").write_text("kept")
    second = prepare_headers(tmp_path / "cache", usr_src=usr_src)
    assert second == first
    assert (second / MARKER).stat().st_mtime_ns == stamp
    assert (second / "include" / "noop-was-here").exists()


def test_upgraded_sources_trigger_a_new_merge(tmp_path: Path) -> None:
    usr_src, common, _ = make_debian(tmp_path / "root")
    cache = tmp_path / "cache"
    merged = prepare_headers(cache, usr_src=usr_src)
    (common / "Makefile").write_text("VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 2\n")
    kw = _no_kernel(tmp_path)
    assert find_headers("6.18.0", cache_dir=cache, usr_src=usr_src, **kw).kind == "mergeable"
    assert prepare_headers(cache, usr_src=usr_src) == merged
    assert "SUBLEVEL" in (merged / "Makefile").read_text()
    assert find_headers("6.18.0", cache_dir=cache, usr_src=usr_src, **kw).kind == "merged"


@pytest.mark.parametrize("changed", ["common Makefile", "autoconf.h", "utsrelease.h",
                                     "the merging code"])
def test_a_merge_is_made_again_when_what_it_was_made_from_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: str) -> None:
    """Each input of a merged tree changed alone (a source tree's file installed again,
    with the same text and a new time; noop's merging code) merges it again."""
    usr_src, common, flavour = make_debian(tmp_path / "root")
    cache = tmp_path / "cache"
    merged = prepare_headers(cache, usr_src=usr_src)
    marker = (merged / MARKER).read_text()
    generated = flavour / "include" / "generated"
    path = {"common Makefile": common / "Makefile", "autoconf.h": generated / "autoconf.h",
            "utsrelease.h": generated / "utsrelease.h"}.get(changed)
    if path is None:
        monkeypatch.setattr(kheaders, "_merger", lambda: "another")
    else:
        st = path.stat()
        path.write_text(path.read_text())
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    kw = _no_kernel(tmp_path)
    assert find_headers("6.18.0", cache_dir=cache, usr_src=usr_src, **kw).kind == "mergeable"
    assert prepare_headers(cache, usr_src=usr_src) == merged
    assert (merged / MARKER).read_text() != marker
    assert find_headers("6.18.0", cache_dir=cache, usr_src=usr_src, **kw).kind == "merged"


def test_half_done_merge_is_never_used(tmp_path: Path) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    cache = tmp_path / "cache"
    half = cache / "kernel-headers" / f"{VERSION}-amd64"
    (half / "include").mkdir(parents=True)  # no marker: a crashed merge
    leftover = cache / "kernel-headers" / f".{VERSION}-amd64.crashed"
    leftover.mkdir()
    found = find_headers("6.18.0", cache_dir=cache, usr_src=usr_src, **_no_kernel(tmp_path))
    assert (found.kind, found.usable) == ("mergeable", False)
    merged = prepare_headers(cache, usr_src=usr_src)
    assert (merged / MARKER).is_file() and (merged / "Makefile").is_file()
    assert not leftover.exists()


def test_find_prefers_running_kernel_headers(tmp_path: Path) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    modules = tmp_path / "modules"
    build = modules / "6.18.0" / "build"
    (build / "include").mkdir(parents=True)
    (build / "arch").mkdir()
    found = find_headers(
        "6.18.0", usr_src=usr_src, lib_modules=modules, ikheaders=tmp_path / "none"
    )
    assert (found.kind, found.path, found.usable) == ("modules", build, True)


def test_find_uses_kernel_builtin_headers(tmp_path: Path) -> None:
    blob = tmp_path / "kheaders.tar.xz"
    blob.write_bytes(b"")
    found = find_headers(
        "6.18.0", usr_src=tmp_path / "src", lib_modules=tmp_path / "m", ikheaders=blob
    )
    assert (found.kind, found.usable) == ("ikheaders", True)


def test_find_reports_nothing(tmp_path: Path) -> None:
    found = find_headers(
        "6.18.0", cache_dir=tmp_path / "c", usr_src=tmp_path / "src", **_no_kernel(tmp_path)
    )
    assert (found.kind, found.path, found.usable) == ("none", None, False)


def test_find_honours_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kheaders.ENV_VAR, str(tmp_path / "nowhere"))
    found = find_headers("6.18.0")
    assert (found.kind, found.usable) == ("env", False)
    assert "no include/" in found.detail


def test_pairs_prefer_plain_flavour_and_newest(tmp_path: Path) -> None:
    usr_src = tmp_path / "src"
    for name in (
        "linux-headers-6.1.0-9-common",
        "linux-headers-6.1.0-9-amd64",
        "linux-headers-6.1.0-56-common",
        "linux-headers-6.1.0-56-amd64",
        "linux-headers-6.1.0-56-cloud-amd64",
        "linux-headers-6.1.0-60-amd64",  # its -common is missing: unusable
        "linux-headers-6.1.0-56-arm64",  # another architecture
    ):
        (usr_src / name / "include").mkdir(parents=True)
        (usr_src / name / "arch").mkdir()
    names = [p.name for p in kheaders.debian_pairs(usr_src, machine="x86_64")]
    assert names == ["6.1.0-56-amd64", "6.1.0-9-amd64", "6.1.0-56-cloud-amd64"]


def test_pairs_understand_ubuntu_layout(tmp_path: Path) -> None:
    usr_src = tmp_path / "src"
    for name in ("linux-headers-5.15.0-91", "linux-headers-5.15.0-91-generic"):
        (usr_src / name / "include").mkdir(parents=True)
        (usr_src / name / "Makefile").write_text("")
    (pair,) = kheaders.debian_pairs(usr_src, machine="x86_64")
    assert (pair.name, pair.common_dir.name) == ("5.15.0-91-generic", "linux-headers-5.15.0-91")


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / "x"))
    assert kheaders.default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("NOOP_CACHE_DIR")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert kheaders.default_cache_dir() == Path("/var/cache/noop")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kheaders.default_cache_dir() == tmp_path / "xdg" / "noop"


def test_ensure_bcc_env_merges_and_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    monkeypatch.setattr(kheaders, "USR_SRC", usr_src)
    monkeypatch.setattr(kheaders, "LIB_MODULES", tmp_path / "no-modules")
    monkeypatch.setattr(kheaders, "IKHEADERS", tmp_path / "no-kheaders")
    path = kheaders.ensure_bcc_env(tmp_path / "cache")
    assert path == str(tmp_path / "cache" / "kernel-headers" / f"{VERSION}-amd64")
    assert os.environ[kheaders.ENV_VAR] == path
    # Already set: left alone.
    assert kheaders.ensure_bcc_env(tmp_path / "cache") is None
    assert os.environ[kheaders.ENV_VAR] == path


def test_ensure_bcc_env_leaves_real_headers_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob = tmp_path / "kheaders.tar.xz"
    blob.write_bytes(b"")
    monkeypatch.setattr(kheaders, "IKHEADERS", blob)
    monkeypatch.setattr(kheaders, "LIB_MODULES", tmp_path / "no-modules")
    assert kheaders.ensure_bcc_env(tmp_path / "cache") is None
    assert kheaders.ENV_VAR not in os.environ


def test_main_prepare_explains_missing_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kheaders, "USR_SRC", tmp_path / "empty")
    monkeypatch.setattr(kheaders, "LIB_MODULES", tmp_path / "no-modules")
    monkeypatch.setattr(kheaders, "IKHEADERS", tmp_path / "no-kheaders")
    assert kheaders.main_prepare([]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install linux-headers-amd64" in err


def test_main_prepare_prints_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    usr_src, _, _ = make_debian(tmp_path / "root")
    monkeypatch.setattr(kheaders, "USR_SRC", usr_src)
    monkeypatch.setattr(kheaders, "LIB_MODULES", tmp_path / "no-modules")
    monkeypatch.setattr(kheaders, "IKHEADERS", tmp_path / "no-kheaders")
    assert kheaders.main_prepare([]) == 0
    out = capsys.readouterr().out
    assert kheaders.ENV_VAR not in os.environ
    assert out.count("\n") == 1 and f"{VERSION}-amd64" in out


# --- privileged: the real Debian trees and BCC on this machine -------------

# Without root, or root without BCC or headers, is a broken set-up: failed, not skipped.
privileged = pytest.mark.usefixtures("privileged")


@pytest.fixture(scope="module")
def real_bcc() -> None:
    probe = [sys.executable, "-c", "import bcc; bcc.BPF.attach_uprobe"]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        pytest.fail("distro BCC not importable: apt-get install python3-bpfcc", pytrace=False)


@pytest.fixture(scope="module")
def real_merged(tmp_path_factory: pytest.TempPathFactory, real_bcc: None) -> Path:
    if not kheaders.debian_pairs():
        if kheaders.find_headers().usable:
            pytest.skip("no split Debian headers here, and none needed")
        pytest.fail(f"no kernel headers: {kheaders.INSTALL_HINT}", pytrace=False)
    return prepare_headers(tmp_path_factory.mktemp("cache"))


_UPROBE_PROGRAM = """
import ctypes, os
from bcc import BPF
b = BPF(text='''
BPF_ARRAY(hits, u64, 1);
int f(struct pt_regs *ctx) {
    int k = 0; u64 *v = hits.lookup(&k);
    if (v) __sync_fetch_and_add(v, 1);
    return 0;
}''')
b.attach_uprobe(name="c", sym="getpid", fn_name="f", pid=os.getpid())
libc = ctypes.CDLL(None)
for _ in range(23):
    libc.getpid()
print(b["hits"][ctypes.c_int(0)].value)
"""


def _run_bcc(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _UPROBE_PROGRAM],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


@privileged
def test_real_merge_compiles_and_attaches_a_uprobe(real_merged: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != kheaders.ENV_VAR}
    env[kheaders.ENV_VAR] = str(real_merged)
    done = _run_bcc(env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "23"


@privileged
def test_real_kernel_without_headers_fails_in_bcc(tmp_path: Path, real_bcc: None) -> None:
    if kheaders.find_headers(cache_dir=tmp_path).kind != "mergeable":
        pytest.skip("the running kernel has its own headers here")
    env = {k: v for k, v in os.environ.items() if k != kheaders.ENV_VAR}
    done = _run_bcc(env)
    assert done.returncode != 0
    # What a user sees without noop's help: BCC looks in /lib/modules only.
    assert "Failed to compile BPF module" in done.stderr
    assert "/lib/modules/" in done.stderr
