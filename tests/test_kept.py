"""What the set-up and the tests keep and reuse is made again when anything it was made
from changes: each input of each kept thing is changed in turn here, and the thing is
seen made again (docs/tests.md, "What is kept, and what its key covers"). A key that
misses an input reuses a stale thing: a base image built before a dependency was added
once hid a broken fresh install behind a green run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib import util
from pathlib import Path

import pytest
from harness import builds, programs

from agent.kernel import compile, kheaders

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------
# The image's base (deploy/build-image): reused while its key is the same.

@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """What deploy/build-image reads of a tree, copied: it keys a copy like the tree."""
    copy = tmp_path / "tree"
    for part in ("deploy", "agent", "bpf"):
        shutil.copytree(REPO / part, copy / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, copy / name)
    return copy


def _base_key(tree: Path, **env: str) -> str:
    done = subprocess.run([str(tree / "deploy" / "build-image")], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHON": sys.executable,
                               "NOOP_PRINT_BASE_KEY": "1", **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _step_files(tree: Path) -> list[str]:
    done = subprocess.run([str(tree / "deploy" / "image" / "step-files"), str(tree)],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


def test_the_image_base_is_built_again_when_anything_it_is_made_from_changes(
        tree: Path, tmp_path: Path) -> None:
    """The package list, install.sh, build-image itself, every file of the tree the
    headers step imports, the apt sources and the week: each changed alone gives another
    base; a module the step does not import (the cache's writer) gives the same."""
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
                       "Components: main\n")
    fake = tmp_path / "bin"  # the week, as `date` tells it: the test's own, not the clock's
    fake.mkdir()
    week = tmp_path / "week"
    week.write_text("2031-W06\n")
    (fake / "date").write_text(f"#!/bin/sh\ncat {week}\n")
    (fake / "date").chmod(0o755)
    env = {"NOOP_APT_SOURCES": str(sources), "PATH": f"{fake}:{os.environ['PATH']}"}
    first = _base_key(tree, **env)
    assert first.startswith("localhost/noop-base:")
    step = _step_files(tree)
    assert "agent/kernel/kheaders.py" in step and "agent/files.py" in step
    inputs = ["deploy/image/packages", "deploy/image/install.sh", "deploy/build-image", *step]
    seen = {first}
    for name in inputs:
        path = tree / name
        before = path.read_bytes()
        path.write_bytes(before + b"\n# changed\n")
        key = _base_key(tree, **env)
        assert key not in seen, f"{name} is not in the base's key"
        seen.add(key)
        path.write_bytes(before)
    assert _base_key(tree, **env) == first
    sources.write_text(sources.read_text().replace("main", "main contrib"))
    assert _base_key(tree, **env) not in seen, "the apt sources are not in the base's key"
    sources.write_text(sources.read_text().replace("main contrib", "main"))
    week.write_text("2031-W07\n")  # another week: the archive moved (security updates)
    assert _base_key(tree, **env) not in seen, "the week is not in the base's key"
    week.write_text("2031-W06\n")
    cache = tree / "agent" / "cache.py"
    assert "agent/cache.py" not in step
    cache.write_text(cache.read_text() + "\n# changed\n")
    assert _base_key(tree, **env) == first, "a module the step does not read changed the key"


# ---------------------------------------------------------------------------------------
# Test programs (tests/harness/builds.py): built once per key and kept.

HELLO = 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("kept") }\n'


@pytest.mark.builds
def test_a_test_program_is_built_again_when_anything_it_is_made_from_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its sources, its flags, its toolchain (another version at the same path) and the
    distribution's libraries it links: each changed alone builds it again; the caller's
    environment cannot change what is built (a build sees only its own)."""
    monkeypatch.setattr(builds, "KEPT", tmp_path / "kept")
    made: list[list[str]] = []
    real = programs.run_build

    def counting(command: list[str], **kw: object) -> None:
        made.append(command)
        real(command, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(programs, "run_build", counting)
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.go").write_text(HELLO)
    toolchain = tmp_path / "toolchain"
    toolchain.mkdir()
    go = toolchain / "go"  # Debian's Go, saying of itself what the test tells it to
    version = tmp_path / "version"
    version.write_text("go version go1.19.8 linux/amd64")
    go.write_text(f'#!/bin/sh\n[ "$1" = version ] && exec cat {version}\n'
                  f'exec {programs.DEBIAN_GO} "$@"\n')
    go.chmod(0o755)

    def build(flags: tuple[str, ...] = ()) -> Path:
        builds.tool.cache_clear()  # what the toolchain says of itself is asked again
        return programs.go_build(go, tmp_path / "out" / "hello", src=src, flags=flags)

    def rebuilt(change: Callable[[], object], flags: tuple[str, ...] = ()) -> bool:
        count = len(made)
        change()
        build(flags)
        return len(made) == count + 1

    build()
    assert len(made) == 1
    assert not rebuilt(lambda: None), "built again with nothing changed"
    assert rebuilt(lambda: (src / "main.go").write_text(HELLO.replace("kept", "changed")))
    assert rebuilt(lambda: None, flags=("-ldflags=-s -w",))
    assert rebuilt(lambda: version.write_text("go version go1.19.9 linux/amd64"))
    monkeypatch.setattr(builds, "packages", lambda pattern: f"{pattern} 2:0.0-changed")  # new
    assert rebuilt(lambda: None)
    # The caller's GOAMD64 would change the code Go makes (and the build settings it
    # records): the build never sees it, so neither the key nor the bytes change.
    monkeypatch.setenv("GOAMD64", "v3")
    assert not rebuilt(lambda: None), "the caller's environment built it again"
    (src / "main.go").write_text(HELLO.replace("kept", "once more"))
    out = build()
    assert len(made) == 6
    settings = subprocess.run([str(programs.DEBIAN_GO), "version", "-m", str(out)],
                              capture_output=True, text=True, check=True, timeout=60).stdout
    assert "GOAMD64=v1" in settings, f"the caller's GOAMD64 reached the build:\n{settings}"


# ---------------------------------------------------------------------------------------
# Compiled BPF (agent/kernel/compile.py): kept by what decides the compiled program.

def _compiled() -> compile.Compiled:
    return compile.Compiled.from_json({"license": "GPL", "kern_version": 0, "maps": [],
                                       "functions": {"f": {"insns": "lQAAAAAAAAA=",
                                                           "maps": []}}})


def test_a_compiled_program_is_compiled_again_when_anything_it_is_made_from_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept for one C text: another text, other flags, another BCC (its version, or the
    same version built again), another kernel, other kernel headers (another tree, or the
    same tree installed or merged again) each find nothing kept, so the compiler runs."""
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / "cache"))
    headers = tmp_path / "headers"
    generated = headers / "include" / "generated"
    generated.mkdir(parents=True)
    (headers / "Makefile").write_text("VERSION = 6\n")
    (generated / "autoconf.h").write_text("#define CONFIG_X86 1\n")
    monkeypatch.setenv(kheaders.ENV_VAR, str(headers))
    bcc = tmp_path / "site" / "bcc"  # a BCC the test can install again
    bcc.mkdir(parents=True)
    (bcc / "__init__.py").write_text("")
    (bcc / "version.py").write_text("__version__ = '0.26.0'\n")
    spec = util.spec_from_file_location("bcc", bcc / "__init__.py",
                                        submodule_search_locations=[str(bcc)])
    real_find_spec = util.find_spec
    monkeypatch.setattr(compile.util, "find_spec",
                        lambda name, *a: spec if name == "bcc" else real_find_spec(name, *a))
    text = "int f(void *ctx) { return 0; }\n"
    compile._bcc_build.cache_clear()
    compile.store(text, _compiled())
    assert compile.cached(text) is not None

    def missed_after(change: Callable[[], object]) -> bool:
        """Whether nothing kept is found once ``change`` is made (seen by a new start of
        noop: BCC's build is read once a process); then what the compiler would keep
        under the new inputs is kept, for the next change."""
        change()
        compile._bcc_build.cache_clear()
        missed = compile.cached(text) is None
        compile.store(text, _compiled())
        assert compile.cached(text) is not None
        return missed

    def rewrite(path: Path, data: str) -> Callable[[], object]:
        def do() -> None:  # as a package's files installed again: a new modification time
            st = path.stat()
            path.write_text(data)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return do

    assert not missed_after(lambda: None)
    assert compile.cached(text + " ") is None
    assert missed_after(lambda: monkeypatch.setattr(compile, "CFLAGS",
                                                    [*compile.CFLAGS, "-O1"]))
    version = bcc / "version.py"
    assert missed_after(rewrite(version, "__version__ = '0.27.0'\n")), "BCC's version"
    assert missed_after(rewrite(version, version.read_text())), "BCC built again"
    assert missed_after(lambda: monkeypatch.setattr(compile.platform, "release",
                                                    lambda: "9.9.9-test"))
    other = tmp_path / "other-headers"
    shutil.copytree(headers, other)
    assert missed_after(lambda: monkeypatch.setenv(kheaders.ENV_VAR, str(other)))
    for path in (other / "Makefile", other / "include" / "generated" / "autoconf.h"):
        assert missed_after(rewrite(path, path.read_text())), f"{path.name} installed again"
    assert missed_after(lambda: (other / kheaders.MARKER).write_text("merger=another\n")), \
        "headers merged again"


# ---------------------------------------------------------------------------------------
# The venv (setup.sh): noop and its pinned dependencies installed again when they change.

def test_the_venv_is_installed_again_when_anything_it_is_made_from_changes(
        tree: Path) -> None:
    """setup.sh's venv_made_from, run on a copy of the tree: the pins, setup.py and the
    walk in C each change it (the interpreter's version is its fourth input)."""
    function = subprocess.run(["sed", "-n", "/^venv_made_from() {/,/^}/p",
                               str(REPO / "setup.sh")], capture_output=True, text=True,
                              check=True, timeout=60).stdout
    assert "python3 --version" in function, "setup.sh's venv_made_from went away"

    def made_from() -> str:
        return subprocess.run(["bash", "-c", f"{function}\nvenv_made_from"], cwd=tree,
                              capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()

    seen = {made_from()}
    for name in ("pyproject.toml", "setup.py", "agent/binary/dwarf/_walk.c"):
        path = tree / name
        path.write_text(path.read_text() + "\n")
        assert made_from() not in seen, f"{name} is not in the venv's stamp"
        seen.add(made_from())
