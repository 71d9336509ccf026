"""The workloads of ``noop bench``: built from examples/bench, what each op calls, the
site every arm probes, and one run of a workload with its own per-call timings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.binary.proof import Proof, Unprovable
from agent.errors import NoopError, NotFound

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "bench"
DEBIAN_GO = Path("/usr/bin/go")  # Debian's Go builds client_golang from GOPATH, offline
GOPATH = Path("/usr/share/gocode")
PKG = "github.com/prometheus/client_golang/prometheus"
KINDS = ("go", "c", "rust")
# What each op of the workloads calls, so every arm probes that function's code.
FUNCTIONS = {
    "counter.Inc": f"{PKG}.(*counter).Inc",
    "counter.Add": f"{PKG}.(*counter).Add",
    "gauge.Add": f"{PKG}.(*gauge).Add",
    "gauge.Sub": f"{PKG}.(*gauge).Sub",
    "gauge.Set": f"{PKG}.(*gauge).Set",
    "histogram.Observe": f"{PKG}.(*histogram).Observe",
    "summary.Observe": f"{PKG}.(*summary).Observe",
    "countervec.Inc": f"{PKG}.(*counter).Inc",  # a *CounterVec child's, after its lookup
    "func": "main.work",
}
GO_OPS = tuple(FUNCTIONS)
# The Rust workload's ops (the prometheus crate's updates), each the whole of a function
# of its own: rust_loop::counter_inc for counter.inc.
RUST_OPS = ("counter.inc", "counter.inc_by", "fcounter.inc_by", "gauge.set", "gauge.add",
            "gauge.sub", "intgauge.set", "histogram.observe", "countervec.inc", "local.flush")
OPS = GO_OPS + RUST_OPS
# The float argument of each method that has one: what the noop-value arm reads.
FLOAT_PARAMS = {FUNCTIONS["counter.Add"]: "v", FUNCTIONS["gauge.Add"]: "val",
                FUNCTIONS["gauge.Sub"]: "val", FUNCTIONS["gauge.Set"]: "val",
                FUNCTIONS["histogram.Observe"]: "v", FUNCTIONS["summary.Observe"]: "v"}


@dataclass(frozen=True, slots=True)
class Site:
    """The one instruction every arm probes: a virtual address in ``binary`` (and its
    offset in the file, which is what the kernel's uprobe takes)."""

    binary: str  # absolute path
    function: str
    address: int
    file_offset: int
    entry: bool  # the address is the function's first instruction
    fixed: bool = False  # the address was asked for: noop's arms probe it too
    proof: Proof | None = None  # that the address starts an instruction of this build


def workload_function(kind: str, op: str) -> str:
    """The function the workload of ``kind`` calls for ``op`` (where the arms probe)."""
    if kind == "rust":
        if op not in RUST_OPS:
            raise NotFound("op", op, RUST_OPS)
        return "rust_loop::" + op.replace(".", "_")
    if op not in FUNCTIONS or (kind == "c" and op != "func"):
        raise NotFound("op", op, GO_OPS if kind == "go" else ("func",))
    return "work" if kind == "c" else FUNCTIONS[op]


def expected_final(op: str, calls_total: int) -> float:
    """The metric's final value after ``calls_total`` calls of ``op`` (see go-loop and
    rust-loop)."""
    if op in ("gauge.Sub", "gauge.sub"):
        return -2.5 * calls_total
    per = {"counter.Add": 2.5, "gauge.Add": 2.5, "gauge.add": 2.5, "counter.inc_by": 3.0,
           "fcounter.inc_by": 1.5}.get(op, 1.0)
    return per * calls_total


def build_workload(kind: str, out_dir: Path, base_env: Mapping[str, str] | None = None
                   ) -> Path:
    """Build the ``go`` or ``c`` workload into ``out_dir``; the path of the program.
    ``base_env``: the environment it builds in (default: noop's own), plus Go's settings."""
    if kind not in KINDS:
        raise NotFound("workload", kind, KINDS)
    src = EXAMPLES / {"go": "go-loop", "c": "c-loop", "rust": "rust-loop"}[kind]
    if not src.is_dir():
        raise NoopError(f"workload sources not found: {src}",
                        "noop bench builds its workloads from a source tree of noop")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / src.name
    if kind == "go":
        if not DEBIAN_GO.exists() or not (GOPATH / "src" / PKG).is_dir():
            raise NoopError("the Go workload needs Debian's Go and client_golang sources",
                            "apt-get install golang-go golang-github-prometheus-client-golang-dev")
        env = {**(base_env or os.environ), "GO111MODULE": "off", "GOPATH": str(GOPATH),
               "GOFLAGS": "", "GOENV": "off", "GOPROXY": "off", "GOTOOLCHAIN": "local",
               "CGO_ENABLED": "0", "GOCACHE": str(out_dir / ".gocache")}
        command = [str(DEBIAN_GO), "build", "-o", str(out), "."]
    elif kind == "rust":
        cargo = shutil.which("cargo")
        if cargo is None:
            raise NoopError("the Rust workload needs cargo and Debian's prometheus crate",
                            "apt-get install cargo librust-prometheus-dev")
        # built offline from Debian's crates (its .cargo/config.toml), then copied out
        env = {**(base_env or os.environ), "CARGO_TARGET_DIR": str(out_dir / "rust-target")}
        command = [cargo, "build", "--release", "--offline", "--quiet"]
    else:
        gcc = shutil.which("gcc")
        if gcc is None:
            raise NoopError("the C workload needs gcc", "apt-get install gcc")
        env = dict(base_env or os.environ)
        command = [gcc, "-O2", "-g", "-o", str(out), "loop.c"]
    try:
        done = subprocess.run(command, cwd=src, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NoopError(f"building the {kind} workload timed out", "try again on an idle "
                        "machine") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise NoopError(f"building the {kind} workload failed: {last}",
                        f"run `{' '.join(command)}` in {src} to see every message")
    if kind == "rust":
        shutil.copy2(out_dir / "rust-target" / "release" / src.name, out)
    return out


def site_address(binary: str | Path, function: str) -> int:
    """The address of ``function``'s first instruction, as noop itself resolves it."""
    return make_site(binary, function).address


def make_site(binary: str | Path, function: str, address: int | None = None) -> Site:
    """The site every arm probes: ``address`` (default: ``function``'s entry)."""
    from agent.plan.binary import Binary
    b = Binary(str(binary))
    sym, _die = b.functions.find(function)
    at = sym.address if address is None else address
    if not sym.address <= at < sym.address + max(sym.size, 1):
        raise NoopError(f"address {at:#x} is outside {function}",
                        f"{function} spans {sym.address:#x}..{sym.address + sym.size:#x}")
    try:
        proven = b.prove_at(at)
    except Unprovable as exc:
        raise NoopError(f"{function}: {exc.message}", "give the address of an instruction "
                        "(objdump -d shows them)") from None
    return Site(str(Path(binary).resolve()), function, at, b.elf.file_offset(at),
                at == sym.address, address is not None, proven)


def run_workload(site: Site, op: str, calls: int, rounds: int, timeout: float,
              ) -> tuple[tuple[float, ...], int, float]:
    command = [site.binary, "-op", op, "-n", str(calls), "-rounds", str(rounds)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise NoopError(f"the workload ran over {timeout:.0f} s",
                        "give fewer calls or rounds") from exc
    if done.returncode != 0:
        raise NoopError(f"the workload exited {done.returncode}: {done.stderr.strip()}",
                        "check -op against the workload's ops")
    per_call: list[float] = []
    end: dict[str, Any] = {}
    try:
        for line in done.stdout.splitlines():
            record = json.loads(line)
            if "final" in record:
                end = record
            else:
                per_call.append(float(record["ns_per_call"]))
        return tuple(per_call), int(end["calls_total"]), float(end["final"])
    except (ValueError, KeyError, TypeError) as exc:
        raise NoopError(f"the workload printed something else than its JSON lines: {exc}",
                        "is the binary one of noop's bench workloads?") from exc
