"""arm64 binaries read on this x86-64 machine (``agent.binary.arch``): the example
(examples/go-prometheus) cross-built with GOARCH=arm64 by Go 1.19 and the newest Go,
with DWARF and stripped. ``noop funcs`` lists what the symbol table (nm) lists,
``struct`` lays a struct out as llvm-dwarfdump reads its DWARF, ``vars`` puts Go's
register arguments in the registers DWARF names (x0, x1: AADWARF64's numbers) and, on
a stripped build, where the Go arm64 register ABI assigns them; ``lines`` gives the
statement addresses of the DWARF line table.

Plans (``noop check``): an entry probe of a Go function with a stack check goes on the
``b.ls`` after ``cmp sp, x16`` (hits taking it dropped: condition LS), an exit probe on
every ``ret`` llvm-objdump shows in the function, a line probe on a statement of the
line table; the kernel's handling of every instruction of the build is the class its
mnemonic (llvm-objdump's) puts it in; the generated C reads arm64's pt_regs and
compiles; an entry whose first instruction heads a loop is refused. Probing one here is
refused in one line (this kernel is x86-64). ``noop run --binary``'s mirror: the
runtime's globals found in arm64 code as the symbol table has them, the plan's one
probe where the program gathers a registry; noop run's counts of every update are
refused in one line. ``noop --binary``'s update probes: where llvm-objdump shows each
atomic took effect, with the registers that hold it there. Layouts and parameters
against gdb-multiarch too.

The Rust example (examples/rust-prometheus) built for arm64 by Debian's rustc with its
arm64 standard library: functions, Metrics' layout, tick's parameters and lines, its
entry and exits, as nm, gdb-multiarch, llvm-dwarfdump and llvm-objdump have them; noop
--binary's sites where each outline atomic (``bl __aarch64_ldadd8_*``, a
``__aarch64_cas8_*`` loop) returns and at each store; noop run's plan the gather probe
alone."""

from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import builds
from harness.noop import run
from harness.programs import (
    PROGRAMS,
    cargo_build,
    go_build,
    go_toolchain,
    installed,
    run_build,
)

from agent.binary.abi import goabi
from agent.binary.abi.shape import Shape, word
from agent.binary.arch import ARM64
from agent.binary.dwarf.locations import Piece
from agent.binary.elf import ElfFile
from agent.binary.gometa import runtimevars
from agent.binary.gometa.program import GoProgram
from agent.tools import inspect

pytestmark = pytest.mark.builds  # cross-builds of the example

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "go-prometheus"
VARIANTS = [(v, s) for v in ("1.19", "newest") for s in ("dwarf", "stripped")]


def test_the_go_arm64_register_abi() -> None:
    """abi-internal.md's arm64 registers: integers in R0 to R15 (x0..), floats in F0 to
    F15 (v0..); results from the first registers again; past sixteen, the stack from 8
    (the word at 0(SP) is the callee's, for the link register)."""
    string = Shape("string", 16, 8)
    a = goabi.assign([word("int"), string, word("float")], [word("int")], arch=ARM64)
    assert [[p.reg for p in x] for x in a.args] == [["x0"], ["x1", "x2"], ["v0"]]
    assert [[p.reg for p in x] for x in a.results] == [["x0"]]
    many = goabi.assign([word("int")] * 17, [], arch=ARM64)
    assert [x[0].reg for x in many.args[:16]] == [f"x{n}" for n in range(16)]
    assert many.args[16] == (Piece(8, stack=8),)


@pytest.fixture(scope="module", params=VARIANTS, ids=lambda v: f"go{v[0]}-{v[1]}")
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[str, Path, Path]:
    """(variant, the arm64 build, its build with DWARF)."""
    version, variant = request.param
    out = tmp_path_factory.mktemp(f"arm64-{version}")
    go = go_toolchain(version)
    twin = go_build(go, out / "dwarf" / "go-prometheus", None, EXAMPLE, goarch="arm64")
    if variant == "dwarf":
        return variant, twin, twin
    return variant, go_build(go, out / "stripped" / "go-prometheus", None, EXAMPLE,
                             ("-ldflags=-s -w",), goarch="arm64"), twin


def _machine(binary: Path) -> int:
    return int.from_bytes(binary.read_bytes()[18:20], "little")


def test_funcs_are_the_symbol_tables(built: tuple[str, Path, Path]) -> None:
    _variant, binary, twin = built
    assert _machine(binary) == 183  # EM_AARCH64
    nm = subprocess.run(["nm", "--defined-only", str(twin)], capture_output=True, text=True,
                        check=True).stdout
    want = {int(a, 16): n for a, t, n in (line.split(" ", 2) for line in nm.splitlines())
            if t in "tT" and n.startswith("main.")}
    got = {r["address"]: r["name"] for r in inspect.function_list(str(binary), "main.*")}
    assert got == want


def test_struct_layout_is_the_dwarfs(built: tuple[str, Path, Path]) -> None:
    variant, binary, twin = built
    # stripped: main.metrics, whose type descriptor the build keeps (main.order has none)
    name = "main.metrics" if variant == "stripped" else "main.order"
    mine = {m["name"]: (m["offset"], m["size"])
            for m in inspect.struct_layout(str(binary), name)["members"]}
    text = subprocess.run(["llvm-dwarfdump", "--debug-info", "--name", name, "-c",
                           str(twin)], capture_output=True, text=True, check=True).stdout
    members = re.findall(r'DW_TAG_member\s+DW_AT_name\s+\("([^"]+)"\).*?'
                         r"DW_AT_data_member_location\s+\((0x[0-9a-f]+|\d+)\)", text, re.S)
    assert members and {n: int(o, 0) for n, o in members} == \
        {n: o for n, (o, _s) in mine.items()}


def test_vars_are_in_the_registers_dwarf_names(built: tuple[str, Path, Path]) -> None:
    """(*metrics).tick(n int): the receiver in x0, n in x1, as llvm-dwarfdump reads the
    build's location lists at the entry (DW_OP_reg0 W0, DW_OP_reg1 W1), and as the ABI
    assigns them on the stripped build."""
    variant, binary, twin = built
    fn = "main.(*metrics).tick"
    got = inspect.function_vars(str(binary), fn)
    assert [(p["type"], [x.get("reg") for x in p["location"]]) for p in got["params"]] == \
        [("*main.metrics", ["x0"]), ("int", ["x1"])]
    assert got["abi"] == "go-internal (register)"
    if variant == "dwarf":
        text = subprocess.run(["llvm-dwarfdump", "--debug-info", "--name", fn, "-c",
                               str(twin)], capture_output=True, text=True, check=True).stdout
        # the registers at the entry as llvm-dwarfdump names them (W0: the low half of x0)
        assert "DW_OP_reg0 W0" in text and "DW_OP_reg1 W1" in text


def test_lines_are_the_line_tables(built: tuple[str, Path, Path]) -> None:
    """Each line's sites are statements of the DWARF line table (a stripped build's, from
    pclntab, which marks no statements: rows of the twin's table, where a line starts)."""
    variant, binary, twin = built
    got = inspect.function_lines(str(binary), "main.placeOrder")
    mine = {s["address"] for e in got["lines"] for s in e["sites"]}
    assert mine and mine <= _statements(twin, "main.placeOrder", variant == "dwarf")


def _statements(twin: Path, function: str, marked: bool) -> set[int]:
    """The addresses of the line table's rows in ``function`` (``marked``: is_stmt ones)."""
    table = subprocess.run(["llvm-dwarfdump", "--debug-line", str(twin)], capture_output=True,
                           text=True, check=True).stdout
    start = inspect.function_list(str(twin), function)[0]
    lo, hi = start["address"], start["address"] + start["size"]
    # address, line, column, file, ISA, discriminator, flags (is_stmt, prologue_end,
    # epilogue_begin, end_sequence: the last no code's)
    rows = re.finditer(r"^0x([0-9a-f]+)(?:[ \t]+\d+){5}((?:[ \t]+\w+)*)[ \t]*$", table, re.M)
    return {int(m[1], 16) for m in rows if lo <= int(m[1], 16) < hi and
            "end_sequence" not in m[2].split() and (not marked or "is_stmt" in m[2].split())}


def _objdump(binary: Path, span: tuple[int, int] | None = None) -> list[tuple[int, str, str]]:
    """(address, mnemonic, operands) of llvm-objdump's disassembly (with the Large
    System Extensions' atomics), of the addresses ``span`` alone when given."""
    args = ["llvm-objdump", "-d", "--no-show-raw-insn", "--mattr=+lse,+rcpc,+pauth"]
    if span:
        args += [f"--start-address={span[0]:#x}", f"--stop-address={span[1]:#x}"]
    text = subprocess.run([*args, str(binary)], capture_output=True, text=True,
                          check=True).stdout
    return [(int(m[1], 16), m[2], m[3].strip()) for m in
            re.finditer(r"^\s*([0-9a-f]+):\s+(\S+)[ \t]*([^\n<]*)", text, re.M)]


SPEC = """version: 1
targets:
  example: {{binary: {binary}}}
probes:
  - name: tick
    function: main.(*metrics).tick
    values: {{n: {n}, g: $goid}}
    metrics: [{{name: ticks_total, type: counter}}]
  - name: tick_exit
    function: main.(*metrics).tick
    at: exit
    values: {{d: $duration}}
"""


def _check(spec: Path) -> dict[str, Any]:
    done = run("check", "--config", spec, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_entry_and_exit_sites_are_objdumps(built: tuple[str, Path, Path],
                                           tmp_path: Path) -> None:
    """tick's entry: the b.ls after its stack check's ``cmp sp, x16`` (emulated, hits
    taking it dropped: condition LS), n in x1, the goroutine's id through x28; its
    exits: every ``ret`` llvm-objdump shows in it."""
    variant, binary, twin = built
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=binary, n="n" if variant == "dwarf" else "p1"))
    plan = _check(spec)
    assert plan["targets"][0]["arch"] == "arm64"
    # where the symbol table (the twin's: the stripped build's code is the same) puts it
    fn = next(r for r in inspect.function_list(str(twin), "main.(*metrics).tick"))
    code = _objdump(binary, (fn["address"], fn["address"] + fn["size"]))
    k = next(k for k, (_a, m, ops) in enumerate(code) if m == "cmp" and ops == "sp, x16")
    assert code[k + 1][1] == "b.ls" and code[0][1:] == ("ldr", "x16, [x28, #16]")
    (entry,) = plan["probes"][0]["sites"]
    assert int(entry["address"], 16) == code[k + 1][0]
    assert (entry["handling"], entry["skip"]) == ("emulated", "condition ls holds")
    assert entry["values"]["n"]["regs"] == ["x1"]
    exits = plan["probes"][1]["sites"]
    assert int(exits[0]["address"], 16) == code[k + 1][0]  # the call's record
    assert sorted(int(s["address"], 16) for s in exits[1:]) == \
        sorted(a for a, m, _ops in code if m == "ret") != []
    assert all(s["handling"] == "emulated" for s in exits)


def test_the_generated_c_reads_arm64s_pt_regs(built: tuple[str, Path, Path],
                                              tmp_path: Path) -> None:
    """The C reads x1 as regs[1], g as regs[28], the stack pointer and pstate (LS: C
    clear or Z set); with arm64's pt_regs (user_pt_regs: regs[31], sp, pc, pstate) in
    place of this kernel's, BCC compiles it."""
    from agent.kernel.compile import compile_c

    variant, binary, _twin = built
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=binary, n="n" if variant == "dwarf" else "p1"))
    done = run("check", "--config", spec, "--emit-c", timeout=120)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "e->v0 = ctx->regs[1];" in text and "ctx->regs[28] + " in text
    assert "hi - ctx->sp" in text
    assert "!(((ctx->pstate >> 29) & 1) && !((ctx->pstate >> 30) & 1))" in text
    assert not re.search(r"ctx->(ax|bx|cx|dx|si|di|r\d+|ip|flags)\b", text)
    shim = ("struct noop_arm64_regs { u64 regs[31]; u64 sp; u64 pc; u64 pstate; };\n"
            "#define pt_regs noop_arm64_regs\n")
    at = text.index("#include <linux/stddef.h>")
    at = text.index("\n", at) + 1
    compiled = compile_c(text[:at] + shim + text[at:])
    assert set(compiled.functions) >= {"noop_p0_s0", "noop_p1_s0", "noop_p1_s1"}


CALLER = """version: 1
targets:
  example: {{binary: {binary}}}
probes:
  - name: tick
    function: main.(*metrics).tick
    values: {{who: $caller}}
  - name: tick_exit
    function: main.(*metrics).tick
    at: exit
    values: {{who: $caller}}
{line}"""
INSIDE = """  - name: inside
    line: main.go:{line}
    values: {{who: $caller}}
"""


def _frame_rows(twin: Path) -> dict[int, tuple[int, int | None]]:
    """llvm-dwarfdump's call-frame rows: pc -> (CFA's offset from sp, the return
    address's from the CFA, None while it is in x30)."""
    text = subprocess.run(["llvm-dwarfdump", "--debug-frame", str(twin)],
                          capture_output=True, text=True, check=True).stdout
    rows: dict[int, tuple[int, int | None]] = {}
    for m in re.finditer(r"^\s+0x([0-9a-f]+): CFA=WSP(?:\+(\d+))?: W30=(same|\[CFA(-\d+)\])",
                         text, re.M):
        rows[int(m[1], 16)] = (int(m[2] or 0), int(m[4]) if m[4] else None)
    return rows


def test_the_caller_is_read_where_the_return_address_is(built: tuple[str, Path, Path],
                                                         tmp_path: Path) -> None:
    """$caller on arm64: at the entry (the stack check's b.ls) and at each ret the return
    address is in the link register, x30; at a line after the prologue it is saved, in
    the slot llvm-dwarfdump's call-frame row names (W30=[CFA-N], CFA=sp+M: sp + M - N).
    A stripped build (no call-frame information) has x30 at its entry."""
    variant, binary, twin = built
    source = (EXAMPLE / "main.go").read_text().splitlines()
    line = next(n for n, x in enumerate(source, 1) if "m.fakeCounter.Inc()" in x)
    spec = tmp_path / "probes.yaml"
    spec.write_text(CALLER.format(binary=binary, line=INSIDE.format(line=line)
                                  if variant == "dwarf" else ""))
    plan = _check(spec)
    fetches = {p["name"]: [(int(s["address"], 16), s["values"]["who"]) for s in p["sites"]
                           if s.get("role") != "call"]  # an exit's entry: read at the return
               for p in plan["probes"]}
    for name in ("tick", "tick_exit"):
        for _at, fetch in fetches[name]:
            assert fetch["kind"] == "caller" and fetch["regs"] == ["x30"], (name, fetch)
    if variant == "stripped":
        return
    rows = _frame_rows(twin)
    for at, fetch in fetches["inside"]:
        cfa, saved = rows[max(pc for pc in rows if pc <= at)]
        assert saved is not None  # tick calls: its prologue saved x30
        assert fetch["kind"] == "caller" and fetch["ops"] == [{"op": "sp", "offset": 0}]
        assert fetch["offset"] == cfa + saved, (at, fetch, cfa, saved)


def test_a_stripped_builds_frames_are_its_twins(built: tuple[str, Path, Path]) -> None:
    """The call-frame information noop makes from a stripped build's pclntab (its SP
    deltas) says what the DWARF build's says (llvm-dwarfdump), row by row over the
    example's and the runtime's functions: CFA = sp + the frame's size, the return
    address in x30 until the prologue saves it at CFA - size."""
    from agent.plan.binary import Binary

    variant, binary, twin = built
    if variant != "stripped":
        return
    rows = _frame_rows(twin)
    frames = Binary(str(binary)).dwarf.frames
    nm = subprocess.run(["nm", "-S", str(twin)], capture_output=True, text=True,
                        check=True).stdout
    spans = [(int(a, 16), int(a, 16) + int(n, 16)) for a, n, t, name in
             (x.split(" ", 3) for x in nm.splitlines() if x.count(" ") >= 3)
             if t in "tT" and name.startswith(("main.", "runtime.m"))]
    compared = 0
    for lo, hi in spans:
        for pc in (pc for pc in rows if lo <= pc < hi):
            cfa, saved = rows[pc]
            assert frames.cfa_rule_at(pc) == ("sp", cfa), hex(pc)
            assert frames.return_address_at(pc) == \
                (("reg", 30) if saved is None else ("cfa", saved)), hex(pc)
            compared += 1
    assert compared > 200, compared


def test_a_line_probe_goes_on_a_statement(built: tuple[str, Path, Path],
                                          tmp_path: Path) -> None:
    """main.go:112 (``total += it.Qty``, in placeOrder's loop): a statement of the line
    table, total in a register; a stripped build's line probe needs debug info, said in
    one line."""
    variant, binary, twin = built
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"version: 1\ntargets:\n  example: {{binary: {binary}}}\nprobes:\n"
                    "  - name: loop\n    line: main.go:112\n    values: {total: total}\n")
    if variant == "stripped":
        done = run("check", "--config", spec, timeout=120)
        assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
        assert "marks no statements" in done.stderr
        return
    (site,) = _check(spec)["probes"][0]["sites"]
    assert int(site["address"], 16) in _statements(twin, "main.placeOrder", True)
    assert site["values"]["total"]["kind"] == "reg"


# What the kernel does with a uprobe on each instruction, by llvm-objdump's mnemonic:
# the branches, ADR and ADRP simulated; exclusive loads and stores, literal loads,
# exception generation, MSR, most hints refused; every other one single-stepped.
_SIMULATED = re.compile(r"(b|bl|br|blr|ret|cbz|cbnz|tbz|tbnz|adr|adrp|b\.\w+)$")
_REFUSED = re.compile(r"(ld[a]?xr[bh]?|st[l]?xr[bh]?|ld[a]?xp|st[l]?xp|svc|hvc|smc|brk|hlt|"
                      r"msr|yield|wfe|wfi|sev|sevl)$")


def test_every_instructions_handling_is_its_class(built: tuple[str, Path, Path]) -> None:
    """Over the whole build, the handling noop gives each instruction (decoded from its
    word) is the class of the mnemonic llvm-objdump gives it; LDR of a literal refused
    (a uprobe's simulation of it was wrong until 6.12)."""
    from agent.binary.elf import ElfFile
    from agent.binary.isa.arm64 import handling

    _variant, binary, _twin = built
    seen: dict[str, int] = {}
    with ElfFile(str(binary)) as elf:
        text = elf.section(".text")
        assert text is not None
        code, base = elf.section_data(text), text.addr
        for address, mnemonic, ops in _objdump(binary):
            if not base <= address < base + len(code) or mnemonic.startswith(("<", ".")):
                continue
            raw = code[address - base:address - base + 4]
            literal = mnemonic in ("ldr", "ldrsw", "prfm") and re.fullmatch(
                r"(\w+, )?0x[0-9a-f]+", ops) is not None
            want = "refused" if _REFUSED.match(mnemonic) or literal else \
                "emulated" if _SIMULATED.match(mnemonic) else "single-stepped"
            assert handling(raw) == want, (hex(address), mnemonic, ops)
            seen[want] = seen.get(want, 0) + 1
    assert min(seen.values()) > 10, seen  # every class met, many times


def test_probing_here_is_refused_in_one_line(built: tuple[str, Path, Path],
                                             tmp_path: Path) -> None:
    """A trace or noop run of the arm64 build on this x86-64 kernel: one line (a uprobe
    of another instruction set would corrupt the file's code), noop run --binary's and
    noop --binary's too; noop run's counts of every update (--mirror both or off) are
    refused on arm64 in one line, saying what works instead."""
    variant, binary, _twin = built
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=binary, n="n" if variant == "dwarf" else "p1"))
    kernel = "is an arm64 binary and this kernel"
    counts = "on arm64 noop reads the update code for noop --binary's lines only"
    for args, said, code in (
            (("--config", spec, "--duration", "1"), kernel, 2),
            (("run", "--config", spec, "--listen", "127.0.0.1:0"), kernel, 2),
            (("run", "--binary", binary, "--listen", "127.0.0.1:0"), kernel, 2),
            (("--binary", binary, "--duration", "1"), kernel, 2),
            (("run", "--binary", binary, "--mirror", "both", "--listen", "127.0.0.1:0"),
             counts, 2),
            (("run", "--binary", binary, "--mirror", "off", "--listen", "127.0.0.1:0"),
             counts, 2)):
        done = run(*args, timeout=120)
        assert done.returncode == code, (args, done.stderr)
        lines = [x for x in done.stderr.splitlines() if x.strip() and "warning:" not in x]
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in done.stderr, \
            done.stderr
        if said == counts:
            assert "noop run --binary" in lines[0]  # what to do instead


def test_the_runtimes_globals_are_found_in_arm64_code(built: tuple[str, Path, Path]) -> None:
    """noop run --binary's go_* series come from the runtime's globals, found by the
    addresses runtime functions form (ADRP and ADD, or a load or store) before they call
    a method: on a build with symbols, each is the symbol table's (nm), ncgocall's not
    the CPU feature flag Go 1.19 tests before its atomic add; a stripped build places
    them elsewhere, and their values are checked in the emulated machine."""
    variant, binary, twin = built
    found = runtimevars.locate(GoProgram(ElfFile(binary))).globals
    assert set(found) == {*runtimevars.GLOBALS, *runtimevars.OPTIONAL}
    if variant == "stripped":
        assert all(found.values())
        return
    nm = subprocess.run(["nm", str(twin)], capture_output=True, text=True, check=True).stdout
    symbols = {n: int(a, 16) for a, _t, n in (x.split(" ", 2) for x in nm.splitlines()
                                              if x.count(" ") >= 2)}
    named = {name: symbols.get(f"runtime.{name}", symbols.get("runtime.numCPUStartup"))
             for name in found}
    assert found == named


def _method(twin: Path, binary: Path, method: str) -> list[tuple[int, str, str]]:
    """llvm-objdump's instructions of client_golang's ``method`` (at the twin's
    symbol: the stripped build's code is the same)."""
    row = inspect.function_list(str(twin), f"{PROM}.{method}")[0]
    return _objdump(binary, (row["address"], row["address"] + row["size"]))


def _ops(operands: str) -> list[str]:
    return [o.strip() for o in operands.replace("[", "").replace("]", "").split(",")]


def test_update_probes_are_where_the_atomics_took_effect(
        built: tuple[str, Path, Path]) -> None:
    """noop --binary's plan of an arm64 build (``noop check --binary``): each update
    where llvm-objdump shows it took effect, with the registers that hold it there.
    Inc's add: the instruction after the exclusive loop's ``cbnz`` (where the LSE
    path's ``b`` lands too), the old value the new less the amount added
    (``add Xt, Xt, Xs``); gauge.Add's compare-and-swap: the instruction after the
    ``tbz`` that retries a lost one, the old value the register ``cmp`` compared and
    the new the one ``stlxr`` stored; Set's release store: the instruction after the
    ``stlr``, the value it stored; the histogram's count: as Inc's, just after the store
    of observe's v (d0) to its frame that follows, v read from that slot; SetToCurrentTime's
    store through the receiver it loaded back from the frame slot it spilled it to."""
    _variant, binary, twin = built
    done = run("check", "--binary", binary, "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    probes = {p["name"]: p for p in plan["probes"]}

    def site(probe: str, tag: str) -> dict[str, Any]:
        """The site in the method's own code (its inlined copies: the test below)."""
        (one,) = [s for s in probes[probe]["sites"] if s["tag"] == tag and
                  "inlined into" not in s["why"]]
        assert one["handling"] in ("emulated", "single-stepped"), one
        return one

    def regs(s: dict[str, Any], name: str) -> list[str]:
        return list(s["values"][name]["regs"])

    for method, probe, tag in (("(*counter).Inc", "counter_int", "counter.Inc"),
                               ("(*histogram).observe", "histogram", "histogram.Observe")):
        code = _method(twin, binary, method)
        k = next(k for k, (_a, m, _o) in enumerate(code) if m == "stlxr")
        assert code[k + 1][1] == "cbnz"
        join = code[k + 2][0]
        lse = next(k for k, (_a, m, _o) in enumerate(code) if m == "ldaddal")
        assert code[lse + 2][1] == "b" and int(code[lse + 2][2].split()[0], 16) == join
        t, _t, s = _ops(code[lse + 1][2])  # add Xt, Xt, Xs
        got = site(probe, tag)
        assert regs(got, "before") == [t, s]
        if probe == "counter_int":
            assert int(got["address"], 16) == join
            continue
        # observe's v (in d0) stored to its frame at the join, for the call after: read
        # from there just after the store, nothing the site reads written on the way
        spill = next(k for k, (a, m, o) in enumerate(code) if a >= join and m == "str"
                     and o.startswith("d0, [sp, #"))
        assert not any(_ops(o)[0] in (t, s) or m.startswith("b")
                       for a, m, o in code if join <= a < code[spill][0])
        assert int(got["address"], 16) == code[spill + 1][0]
        assert got["values"]["observed"]["ops"] == \
            [{"op": "sp", "offset": int(_ops(code[spill][2])[2].lstrip("#"))}]
    code = _method(twin, binary, "(*gauge).Add")
    k = next(k for k, (_a, m, o) in enumerate(code) if m == "tbz" and
             int(o.split(",")[-1].split()[0], 16) == code[0][0])  # the retry
    store = next(o for _a, m, o in code if m == "stlxr")
    compare = next(o for _a, m, o in code if m == "cmp")
    got = site("gauge_add", "gauge.Add")
    assert int(got["address"], 16) == code[k + 1][0]
    assert regs(got, "old") == [_ops(compare)[1]] and regs(got, "new") == [_ops(store)[1]]
    code = _method(twin, binary, "(*gauge).Set")
    k = next(k for k, (_a, m, _o) in enumerate(code) if m == "stlr")
    got = site("gauge_set", "gauge.Set")
    assert int(got["address"], 16) == code[k + 1][0]
    assert regs(got, "new") == [_ops(code[k][2])[0]]
    # SetToCurrentTime: its receiver spilled to the frame before time.Now and loaded
    # back for the store: the same slot, the same stack pointer between
    code = _method(twin, binary, "(*gauge).SetToCurrentTime")
    k = next(k for k, (_a, m, _o) in enumerate(code) if m == "stlr")
    value, base = _ops(code[k][2])
    load = next(_ops(o) for _a, m, o in reversed(code[:k]) if m == "ldr" and
                _ops(o)[0] == base)
    assert load[1] == "sp" and ["x0", "sp", load[2]] in [_ops(o) for _a, m, o in code[:k]
                                                         if m == "str"]
    got = site("gauge_set", "gauge.SetToCurrentTime")
    assert int(got["address"], 16) == code[k + 1][0] and regs(got, "new") == [value]


def test_inlined_copies_are_read_where_objdump_shows_the_update_or_said(
        built: tuple[str, Path, Path]) -> None:
    """Each update method's copy inlined into another function (the Go collector's
    counter Add and gauge Set, AddWithExemplar's Add): its sites there are where
    llvm-objdump shows an update took effect, the registers those it shows (an add's
    two paths, when they go on apart, each at its own end: the instruction after the
    exclusive loop's ``cbnz`` and the LSE path's ``b``), or the plan's notes name the
    copy as not read. No copy is left unsaid."""
    _variant, binary, twin = built
    done = run("check", "--binary", binary, "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    unseen = " ".join(n for p in plan["probes"] for n in p.get("unseen") or ())
    methods = {f"{PROM}.(*{k}).{m}" for k, m in (
        ("counter", "Inc"), ("counter", "Add"), ("gauge", "Inc"), ("gauge", "Dec"),
        ("gauge", "Add"), ("gauge", "Sub"), ("gauge", "Set"), ("gauge", "SetToCurrentTime"),
        ("histogram", "Observe"), ("histogram", "observe"))}
    copies = 0
    for probe in plan["probes"]:
        for s in probe["sites"]:
            if s["function"] in methods:
                continue
            copies += 1
            row = inspect.function_list(str(twin), s["function"])[0]
            code = _objdump(binary, (row["address"], row["address"] + row["size"]))
            j = next(j for j, (a, _m, _o) in enumerate(code) if a == int(s["address"], 16))
            regs = {k: v["regs"] for k, v in s["values"].items() if v.get("regs")}
            if probe["name"] in ("counter_int", "histogram"):
                if code[j - 1][1] == "cbnz":  # the exclusive loop's end
                    load, add, store = (code[j - 4], code[j - 3], code[j - 2])
                    assert (load[1], add[1], store[1]) == ("ldaxr", "add", "stlxr"), s
                else:  # the LSE path's b, after its add
                    assert code[j][1] == "b" and code[j - 2][1].startswith("ldadd"), s
                    add = code[j - 1]
                t, _t, d = _ops(add[2])
                assert regs["before"] == [t, d], s
            elif probe["name"] in ("counter_float", "gauge_add"):
                test = code[j - 1]
                assert test[1] in ("tbz", "cbz") and \
                    int(test[2].split(",")[-1].split()[0], 16) < code[j][0], s
                stored = next(_ops(o)[1] for _a, m, o in reversed(code[:j]) if m == "stlxr")
                assert regs["new"] == [stored], s
            else:
                assert probe["name"] == "gauge_set" and code[j - 1][1] == "stlr", s
                assert regs["new"] == [_ops(code[j - 1][2])[0]], s
    assert copies, "no inlined copy read (the Go collector's are in every build)"
    with_sites = {s["function"] for p in plan["probes"] for s in p["sites"]}
    for method, caller in _inlined_into(twin, methods):
        assert caller in with_sites or caller in methods or \
            f"{method} inlined" in unseen, (method, caller)


def _inlined_into(binary: Path, names: set[str]) -> set[tuple[str, str]]:
    """(function, the function it is inlined into) for each of ``names``' inlined
    copies, as llvm-dwarfdump's dump of ``binary``'s DWARF has them."""
    text = subprocess.run(["llvm-dwarfdump", "--debug-info", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    out, tag, current = set(), "", ""
    for line in text.splitlines():
        if m := re.match(r"0x[0-9a-f]+:\s+DW_TAG_(\w+)", line):
            tag = m[1]
        elif m := re.match(r'\s+DW_AT_(name|abstract_origin)\s+\((?:0x[0-9a-f]+ )?"(.*)"\)',
                           line):
            if tag == "subprogram":
                current = m[2]
            elif tag == "inlined_subroutine" and m[2] in names:
                out.add((m[2], current))
            tag = ""
    assert current, "no function in the dump"
    return out


def test_the_mirrors_plan_is_the_gather_probe_alone(built: tuple[str, Path, Path]) -> None:
    """noop run --binary's plan of an arm64 client_golang program: no update probe, and
    the probe where the program gathers a registry on the ``b.ls`` of Gather's stack
    check (llvm-objdump's, after ``cmp sp|x17, x16``), the registry read from x0."""
    _variant, binary, twin = built
    done = run("check", "--binary", binary, "--run", "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [p["name"] for p in plan["probes"]] == ["registry_gathered"]
    (site,) = plan["probes"][0]["sites"]
    assert site["values"]["registry"]["regs"] == ["x0"]
    gather = "github.com/prometheus/client_golang/prometheus.(*Registry).Gather"
    nm = subprocess.run(["nm", str(twin)], capture_output=True, text=True, check=True).stdout
    start = next(int(x.split()[0], 16) for x in nm.splitlines() if x.endswith(" " + gather))
    insns = _objdump(binary, (start, start + 40))
    cmp = next(n for n, (_a, m, ops) in enumerate(insns)
               if m == "cmp" and ops.replace(" ", "") in ("sp,x16", "x17,x16"))
    assert insns[cmp + 1][1] == "b.ls" and int(site["address"], 16) == insns[cmp + 1][0]


def test_an_entry_that_heads_a_loop_is_refused(built: tuple[str, Path, Path],
                                               tmp_path: Path) -> None:
    """client_golang's (*gauge).Add on arm64 is a leaf whose compare-and-swap, lost to
    a race, branches back to its first instruction (llvm-objdump shows it): a probe
    there would count each pass, so the plan is refused in one line."""
    _variant, binary, twin = built
    fn = "github.com/prometheus/client_golang/prometheus.(*gauge).Add"
    row = inspect.function_list(str(twin), fn)[0]
    start, end = row["address"], row["address"] + row["size"]
    back = [a for a, m, ops in _objdump(binary, (start, end))
            if m.startswith(("b", "cb", "tb")) and re.search(rf"\b{start:#x}\b", ops)]
    assert back, "no branch back to the entry"
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"version: 1\ntargets:\n  example: {{binary: {binary}}}\nprobes:\n"
                    f"  - name: add\n    function: {fn}\n")
    done = run("check", "--config", spec, timeout=120)
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert done.returncode != 0 and len(lines) == 1 and "head of a loop" in lines[0], \
        done.stderr


# --- gdb-multiarch: another reader of the same DWARF ----------------------------------

PROM = "github.com/prometheus/client_golang/prometheus"
# The structs the presets read, and the example's own.
GDB_STRUCTS = ("main.order", "main.item", "main.metrics", f"{PROM}.counter",
               f"{PROM}.gauge", f"{PROM}.histogram", f"{PROM}.histogramCounts")
# The functions the presets probe, and the example's own (main.*, from the symbol table).
GDB_FUNCTIONS = tuple(f"{PROM}.{m}" for m in (
    "(*counter).Add", "(*counter).Inc", "(*gauge).Add", "(*gauge).Set",
    "(*histogram).Observe", "(*CounterVec).WithLabelValues", "(*Registry).Gather"))


def _gdb(binary: Path, commands: list[str]) -> str:
    """What gdb-multiarch prints for ``commands`` on ``binary``, read, not run (no
    init files, no scripts auto-loaded)."""
    args = [str(installed("gdb-multiarch")), "-nx", "-batch", "-iex", "set auto-load off",
            "-iex", "set width 0"]
    for c in commands:
        args += ["-ex", c]
    return subprocess.run([*args, str(binary)], capture_output=True, text=True, timeout=300,
                          check=True).stdout


def _gdb_members(text: str) -> dict[str, tuple[int, int]]:
    """The top-level members of ``ptype/o``'s struct: name -> (offset, size); a member
    that is a struct itself is named on the line that closes it. gdb sizes a func value
    as 1 byte, whatever its type's DW_AT_byte_size (8) says, and pads after it: its size
    here is the room up to the next member (or the struct's end)."""
    rows: list[tuple[str, int, int, bool]] = []
    depth, pending, total = 0, None, 0
    for line in text.splitlines():
        head = re.match(r"/\*\s+(\d+)\s+\|\s+(\d+)\s+\*/\s*(.*)$", line.strip())
        body = head.group(3) if head else line.strip()
        if head and depth == 1:
            member = re.search(r"\b(\w+);$", body)
            if body.endswith("{"):
                pending = (int(head.group(1)), int(head.group(2)))
            elif member:
                rows.append((member.group(1), int(head.group(1)), int(head.group(2)),
                             body.startswith("func(")))
        size = re.match(r"/\* total size \(bytes\):\s+(\d+) \*/", body)
        if size and depth == 1:
            total = int(size.group(1))
        depth += body.count("{") - body.count("}")
        closed = re.match(r"}\s*(\w+);$", body)
        if closed and depth == 1 and pending is not None:
            rows.append((closed.group(1), *pending, False))
            pending = None
    ends = [off for _n, off, _s, _f in rows[1:]] + [total]
    return {n: (off, end - off if func else size)
            for (n, off, size, func), end in zip(rows, ends, strict=True)}


@pytest.mark.parametrize("name", GDB_STRUCTS)
def test_struct_layouts_are_gdbs(built: tuple[str, Path, Path], name: str) -> None:
    """Every member's offset and size as gdb-multiarch lays the twin's DWARF out
    (``ptype/o``); a stripped build answers from type descriptors, for the types that
    keep one (main.order has none, and says so)."""
    variant, binary, twin = built
    want = _gdb_members(_gdb(twin, ["set language c", f"ptype/o struct '{name}'"]))
    assert want, name
    if variant == "stripped" and name == "main.order":
        done = run("struct", binary, name, timeout=120)
        assert done.returncode != 0 and "no type descriptor" in done.stderr, done.stderr
        return
    got = {m["name"]: (m["offset"], m["size"])
           for m in inspect.struct_layout(str(binary), name)["members"]}
    assert got == want


def _entry_registers(text: str, entry: int) -> list[tuple[str, list[str] | None]]:
    """``info scope``'s symbols (inner blocks' first), each with the registers gdb says
    hold it at ``entry`` (None: not all in registers there)."""
    out: list[tuple[str, list[str] | None]] = []
    for block in re.split(r"^(?=Symbol )", text, flags=re.M)[1:]:
        name = block.split()[1]
        if re.match(r"Symbol \S+ is a function at", block):  # one inlined there
            continue
        where = None
        single = re.match(r"Symbol \S+ is a variable in \$(\w+)", block)
        if single:
            where = [single.group(1)]
        for m in re.finditer(r"Range (0x[0-9a-f]+)-0x[0-9a-f]+: (.*)", block):
            if int(m.group(1), 16) == entry:
                pieces = m.group(2).split(", and ")
                regs = [re.fullmatch(r"a variable in \$(\w+)(?: \[\d+-byte piece\])?", p)
                        for p in pieces]
                where = [r.group(1) for r in regs if r] if all(regs) else None
        out.append((name, where))
    return out


def test_parameters_are_where_gdb_finds_them_at_the_entry(
        built: tuple[str, Path, Path]) -> None:
    """Each parameter noop places (``vars``) is in the registers gdb-multiarch's own
    location-list reading names at the function's first instruction (``info scope``),
    piece by piece (a string in x1 and x2, a slice in x1 to x3, a float in v0); for
    the example's functions and those the presets probe. A stripped build's
    parameters, which the Go register ABI assigns from the function's type, are named
    by position: the twin's parameters in the DWARF's order. gdb's scope is read at the
    entry's address (by name it may take an inlined copy's)."""
    variant, binary, twin = built
    mains = [r["name"] for r in inspect.function_list(str(twin), "main.*")]
    functions = [*mains, *GDB_FUNCTIONS]
    # each function's entry, then its scope there (by name, gdb may pick an inlined copy)
    named = _gdb(twin, [f"info address {f}" for f in functions])
    entries = {f: int(m.group(1), 16) for f in functions if (m := re.search(
        rf'Symbol "{re.escape(f)}" is a function at address (0x[0-9a-f]+)', named))}
    text = _gdb(twin, [f"info scope *{a:#x}" for a in entries.values()])
    scopes = dict(zip(entries, re.split(r"^Scope for \*0x[0-9a-f]+(?::| contains no locals "
                                        r"or arguments\.)$", text, flags=re.M)[1:], strict=True))
    compared: set[str] = set()
    for f, entry in entries.items():  # (a name gdb's parser takes apart is not there)
        scope = scopes[f]
        gdbs = _entry_registers(scope, entry)
        params = inspect.function_vars(str(binary), f)["params"]
        if not params:  # none, or none known (a stripped build's function of no type)
            continue
        # a stripped build's p0, p1, ...: the twin's parameters, in its DWARF's order
        names = [p["name"] for p in inspect.function_vars(str(twin), f)["params"]] \
            if variant == "stripped" else [p["name"] for p in params]
        for p, name in zip(params, names, strict=True):
            regs = [x.get("reg") for x in p["location"]]
            where = next((w for g, w in gdbs if g == name), None)
            if where is None:  # gdb places it elsewhere at the entry (or not at all)
                continue
            assert (f, name, regs) == (f, name, where)
            compared.add(f)
    # each function the presets probe, and main's with parameters (a stripped build
    # keeps no type of placeOrder: its parameters are unknown there), compared
    mains = ["main.(*metrics).tick", *(["main.placeOrder"] if variant == "dwarf" else [])]
    assert {*GDB_FUNCTIONS, *mains} <= compared


@pytest.fixture(scope="module")
def c_arm64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/c/lines.c cross-built for arm64 at -O2 with DWARF (Debian's
    gcc-aarch64-linux-gnu)."""
    return _cross_c("lines", tmp_path_factory)


def _cross_c(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/c/NAME.c by Debian's gcc-aarch64-linux-gnu, -O2 with DWARF, kept
    by its inputs."""
    cc = installed("aarch64-linux-gnu-gcc")
    src = PROGRAMS / "c" / f"{name}.c"
    out = tmp_path_factory.mktemp(f"{name}-arm64") / name
    inputs = {"tool": builds.tool(str(cc)), "flags": ["-g", "-O2"], "sources": builds.tree(src),
              "env": builds.environment(cc), "libc": builds.packages("libc6-dev-arm64-cross")}
    return builds.kept(name, inputs, lambda d: run_build(
        [str(cc), "-g", "-O2", "-o", str(d / name), str(src)], cwd=d), out)


def test_a_c_arm64_build_is_planned_from_its_dwarf(c_arm64: Path, tmp_path: Path) -> None:
    """C on arm64: process(round, orders, n, limit)'s parameters in x0 to x3 as
    llvm-dwarfdump's location lists say at its entry;
    an entry probe on its first instruction (no stack check in C), an exit probe on
    every ``ret`` llvm-objdump shows."""
    got = inspect.function_vars(str(c_arm64), "process")
    regs = {p["name"]: [x.get("reg") for x in p["location"]] for p in got["params"]}
    assert regs == {"round": ["x0"], "orders": ["x1"], "n": ["x2"], "limit": ["x3"]}
    text = subprocess.run(["llvm-dwarfdump", "--debug-info", "--name", "process", "-c",
                           str(c_arm64)], capture_output=True, text=True, check=True).stdout
    assert all(f"DW_OP_reg{n} W{n}" in text or f"DW_OP_reg{n} X{n}" in text for n in range(4))
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"version: 1\ntargets:\n  c: {{binary: {c_arm64}}}\nprobes:\n"
                    "  - name: p\n    function: process\n    values: {n: n, round: round}\n"
                    "  - name: done\n    function: process\n    at: exit\n"
                    "    values: {d: $duration}\n")
    plan = _check(spec)
    row = inspect.function_list(str(c_arm64), "process")[0]
    code = _objdump(c_arm64, (row["address"], row["address"] + row["size"]))
    (entry,) = plan["probes"][0]["sites"]
    assert int(entry["address"], 16) == code[0][0] and "skip" not in entry
    assert [entry["values"][v]["regs"] for v in ("n", "round")] == [["x2"], ["x0"]]
    exits = plan["probes"][1]["sites"][1:]
    assert sorted(int(s["address"], 16) for s in exits) == \
        sorted(a for a, m, _ops in code if m == "ret") != []


def test_aapcs64_assigns_as_the_standard_says() -> None:
    """AAPCS64's rules, one case each: general and SIMD registers counted apart, the
    stack from SP at entry past eight of a kind, an HFA's members one register each and
    the stack once they do not fit (no v register after), a 16-aligned aggregate from
    an even register, one over 16 bytes by reference (the copy where the register
    points), a result in memory nowhere (x8 need not be kept)."""
    from agent.binary.abi import aapcs64
    from agent.binary.abi.shape import struct

    i32, i64, f32, f64 = word("int", 4), word("int"), word("float", 4), word("float")
    a = aapcs64.assign([f64, i32, f32, i64], i64)
    assert a.args == ((Piece(8, reg="v0"),), (Piece(4, reg="x0"),), (Piece(4, reg="v1"),),
                      (Piece(8, reg="x1"),))
    assert a.results == ((Piece(8, reg="x0"),),)
    a = aapcs64.assign([i64] * 9 + [i32], None)
    assert a.args[8:] == ((Piece(8, stack=0),), (Piece(4, stack=8),))
    three = struct(f32, f32, f32)
    assert aapcs64.homogeneous(three) == (3, 4)
    assert aapcs64.homogeneous(struct(f32, i32)) is None
    assert aapcs64.homogeneous(struct(f64, f64, f64, f64, f64)) is None  # five: not one
    a = aapcs64.assign([f64] * 6 + [three, f32], None)
    assert a.args[6] == (Piece(12, stack=0),)  # three do not fit in v6, v7
    assert a.args[7] == (Piece(4, stack=16),)  # and no v register after it
    wide = Shape("struct", 16, 8, ((0, Shape("int", 16, 8)),))  # struct { __int128 v; }
    a = aapcs64.assign([i32, wide, i64], None)
    assert a.args[1] == (Piece(8, reg="x2"), Piece(8, reg="x3")) and \
        a.args[2] == (Piece(8, reg="x4"),)
    big = struct(i64, i64, i64)
    a = aapcs64.assign([big, i32], big)
    assert a.args == ((Piece(24, reg="x0", at=0),), (Piece(4, reg="x1"),))
    assert a.by_reference == (True, False) and a.results == ((),)
    assert aapcs64.assign([i64] * 8 + [big], None).args[8] == ()  # its address on the stack


@pytest.fixture(scope="module")
def aapcs_arm64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/programs/c/aapcs.c by gcc-aarch64-linux-gnu, -O2 with DWARF."""
    return _cross_c("aapcs", tmp_path_factory)


AAPCS_FUNCTIONS = ("ints", "floats", "nine", "nine_doubles", "hfa", "cplx", "small",
                   "aligned", "byref", "quad", "spill")


def test_aapcs64_is_where_gccs_dwarf_puts_each_parameter(aapcs_arm64: Path) -> None:
    """Every parameter of tests/programs/c/aapcs.c whose entry location gcc's DWARF
    gives is where noop's AAPCS64 assignment puts it (no "abi says" disagreement):
    integers, floats, the stack past eight, HFAs, small aggregates, a 16-aligned one
    from x2, a large one through x0, a long double in v0. Those DWARF does not place
    at the entry (a frame slot the prologue fills, no location) are the assignment's."""
    compared = 0
    for fn in AAPCS_FUNCTIONS:
        got = inspect.function_vars(str(aapcs_arm64), fn)
        assert got["abi"] == "aapcs64"
        for param in got["params"]:
            assert param["location"], (fn, param)
            if param["source"] == "dwarf":
                assert "abi says" not in param.get("note", ""), (fn, param)
                compared += 1
            else:
                assert param["source"] == "abi", (fn, param)
    assert compared == 50, compared  # all but two (hfa's t, cplx's z), placed by both
    aligned = inspect.function_vars(str(aapcs_arm64), "aligned")["params"]
    assert [x.get("reg") for x in aligned[1]["location"]] == ["x2", "x3"]
    (b, _n) = inspect.function_vars(str(aapcs_arm64), "byref")["params"]
    assert b["location"] == [{"memory": {"reg": "x0", "offset": 0}, "size": 24}]


def test_a_word_capstone_cannot_decode_leaves_the_rest_decoded() -> None:
    """A constant in code (a word no instruction) is one word: what follows it keeps its
    mnemonic, its kind and whether it stores."""
    from agent.binary.isa.arm64 import decode

    words = (0xD503201F, 0xFFFFFFFF, 0xF9000020, 0xD65F03C0)  # nop; .word; str; ret
    got = [(i.mnemonic, i.kind, i.stores) for i in
           decode(b"".join(w.to_bytes(4, "little") for w in words), 0x1000)]
    assert got == [("nop", "next", False), (".word", "next", False), ("str", "next", True),
                   ("ret", "return", False)]


def test_an_authenticated_return_refuses_an_exit_probe(tmp_path: Path) -> None:
    """A C build with pointer authentication (-march=armv8.3-a -mbranch-protection=
    pac-ret) returns with retaa, which the kernel will not probe (llvm-objdump shows
    it): an exit probe is refused in one line when it is planned, not when it attaches."""
    cc = installed("aarch64-linux-gnu-gcc")
    src = PROGRAMS / "c" / "lines.c"
    flags = ["-g", "-O2", "-march=armv8.3-a", "-mbranch-protection=pac-ret"]
    inputs = {"tool": builds.tool(str(cc)), "flags": flags, "sources": builds.tree(src),
              "env": builds.environment(cc), "libc": builds.packages("libc6-dev-arm64-cross")}
    binary = builds.kept("lines", inputs, lambda d: run_build(
        [str(cc), *flags, "-o", str(d / "lines"), str(src)], cwd=d), tmp_path / "lines")
    row = inspect.function_list(str(binary), "process")[0]
    code = _objdump(binary, (row["address"], row["address"] + row["size"]))
    assert any(m == "retaa" for _a, m, _o in code)
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"version: 1\ntargets:\n  c: {{binary: {binary}}}\nprobes:\n"
                    "  - name: done\n    function: process\n    at: exit\n")
    done = run("check", "--config", spec, timeout=120)
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert done.returncode != 0 and len(lines) == 1 and "retaa" in lines[0], done.stderr


def _assembled(tmp_path: Path, text: str) -> tuple[Any, ...]:
    """``text`` assembled by binutils' aarch64 assembler at 0x1000, decoded by noop."""
    from agent.binary.isa import of

    src, obj, raw = tmp_path / "a.s", tmp_path / "a.o", tmp_path / "a.bin"
    src.write_text(".text\n" + text + "\nf: ret\n")
    subprocess.run([str(installed("aarch64-linux-gnu-as")), "-march=armv8.1-a", "-o",
                    str(obj), str(src)], check=True)
    subprocess.run([str(installed("aarch64-linux-gnu-objcopy")), "-O", "binary", "-j",
                    ".text", str(obj), str(raw)], check=True)
    return of("arm64").decode(raw.read_bytes(), 0x1000)


@pytest.mark.parametrize(("code", "want", "rooted"), [
    # the receiver spilled before a call and loaded back (SetToCurrentTime's)
    ("str x30, [sp, #-32]!\nstr x0, [sp, #40]\nbl f\nldr x1, [sp, #40]", ("x0", 0), False),
    # through a frame made by another register, with an offset added after the load
    ("sub x20, sp, #64\nstp x29, x30, [x20, #-8]\nmov sp, x20\nstr x0, [sp, #72]\n"
     "ldr x3, [sp, #72]\nadd x1, x3, #8", ("x0", 8), False),
    # a pre-indexed store and a post-indexed load move the stack pointer both ways
    ("str x30, [sp, #-16]!\nstr x0, [sp, #24]\nldr x30, [sp], #16\nldr x1, [sp, #8]",
     ("x0", 0), False),
    # the slot written again: the later value
    ("str x30, [sp, #-32]!\nstr x0, [sp, #40]\nstr x3, [sp, #40]\nldr x1, [sp, #40]",
     ("x3", 0), False),
    # written in part (a 4-byte store into its upper half): not known
    ("str x30, [sp, #-32]!\nstr x0, [sp, #40]\nstr w3, [sp, #44]\nldr x1, [sp, #40]",
     None, False),
    # a register across a call: the callee's to change (Go saves none across calls)
    ("mov x1, x0\nbl f", None, False),
    # a slot below the stack pointer across a call: the callee's frame
    ("str x0, [sp, #-8]\nbl f\nldr x1, [sp, #-8]", None, False),
    # loaded from elsewhere: unknown, or rooted there (an inlined copy's receiver)
    ("ldr x5, [x7, #16]\nadd x1, x5, #8", None, False),
    ("ldr x5, [x7, #16]\nadd x1, x5, #8", ("=0x1000", 8), True),
])
def test_the_address_registers_origin(tmp_path: Path, code: str, want: Any,
                                      rooted: bool) -> None:
    """``origin`` of x1 before a final store, on code assembled by binutils: through
    stack slots (spilled, reloaded, overwritten whole or in part, below the stack
    pointer across a call) and across calls."""
    from agent.binary.isa.arm64_updates import origin

    insns = _assembled(tmp_path, code + "\nstlr x2, [x1]")
    n = next(k for k, i in enumerate(insns) if i.mnemonic == "stlr")
    assert origin(insns, n, "x1", rooted) == want


# --- Rust: examples/rust-prometheus built for arm64 ----------------------------------------

RUST_TICK = "rust_prometheus::Metrics::tick"
RUST_SPEC = """version: 1
targets:
  example: {{binary: {binary}}}
probes:
  - name: tick
    function: {fn}
    values: {{n: n}}
  - name: tick_exit
    function: {fn}
    at: exit
    values: {{d: $duration}}
"""


def _value_field(code: list[tuple[int, str, str]], k: int, reg: str) -> bool:
    """Whether ``reg`` holds a metric's value field's address at ``code[k]``: the last
    instruction before that writes it adds 152 (the Value's ``val`` in its ArcInner) to
    a register, or copies one that does (the other atomics on an ArcInner are its
    counts, at 0 and 8)."""
    for j in range(k - 1, -1, -1):
        _a, m, o = code[j]
        if o.startswith(f"{reg},"):
            if m == "add" and o.endswith("#152"):
                return True
            return m == "mov" and _value_field(code, j, o.split(",")[1].strip())
    return False


@pytest.fixture(scope="module")
def rust_arm64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/rust-prometheus for arm64 (Debian's rustc and its arm64 standard library,
    Debian's prometheus crate), a release build with DWARF, as the arm64 machine runs it."""
    return cargo_build(EXAMPLE.parent / "rust-prometheus", "prometheus-0.13.*",
                       "librust-prometheus-dev",
                       tmp_path_factory.mktemp("rust-arm64") / "rust-prometheus", arm64=True)


def test_a_rust_arm64_builds_functions_and_layouts_are_nms_and_gdbs(rust_arm64: Path) -> None:
    """``funcs``: the program's functions with code are the symbol table's (nm);
    ``struct``: every member of its Metrics where gdb-multiarch lays the DWARF out."""
    assert _machine(rust_arm64) == 183  # EM_AARCH64
    nm = subprocess.run(["nm", "-C", "--defined-only", str(rust_arm64)], capture_output=True,
                        text=True, check=True).stdout
    want = {int(a, 16) for a, t, n in (line.split(" ", 2) for line in nm.splitlines())
            if t in "tT" and n.startswith("rust_prometheus::")}
    got = {r["address"] for r in inspect.function_list(str(rust_arm64), "rust_prometheus::*")
           if not r.get("only_inlined")}
    assert got == want != set()
    name = "rust_prometheus::Metrics"
    layout = _gdb_members(_gdb(rust_arm64, ["set language c", f"ptype/o struct '{name}'"]))
    mine = {m["name"]: (m["offset"], m["size"])
            for m in inspect.struct_layout(str(rust_arm64), name)["members"]}
    assert mine == layout and len(mine) == 16


def test_a_rust_arm64_builds_parameters_and_lines_are_its_dwarfs(rust_arm64: Path) -> None:
    """``vars``: tick's self and n where gdb-multiarch's reading of the location lists
    puts them at the entry (x0, x1: Rust's parameters are where DWARF says, not
    assigned by an ABI); ``lines``: each site a statement of the line table."""
    got = inspect.function_vars(str(rust_arm64), RUST_TICK)
    regs = {p["name"]: [x.get("reg") for x in p["location"]] for p in got["params"]}
    entry = inspect.function_list(str(rust_arm64), RUST_TICK)[0]["address"]
    gdbs = dict(_entry_registers(_gdb(rust_arm64, [f"info scope *{entry:#x}"]), entry))
    assert regs == {"self": ["x0"], "n": ["x1"]} and \
        {k: gdbs.get(k) for k in regs} == regs
    assert all(p["source"] == "dwarf" for p in got["params"])
    lines = inspect.function_lines(str(rust_arm64), RUST_TICK)
    mine = {s["address"] for e in lines["lines"] for s in e["sites"]}
    assert mine and mine <= _statements(rust_arm64, RUST_TICK, True)


def test_a_rust_arm64_builds_entry_and_exits_are_objdumps(rust_arm64: Path,
                                                          tmp_path: Path) -> None:
    """tick's entry probe on its first instruction (no stack check in Rust), n in x1;
    its exit probe on every ``ret`` llvm-objdump shows in it."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(RUST_SPEC.format(binary=rust_arm64, fn=RUST_TICK))
    plan = _check(spec)
    assert plan["targets"][0]["arch"] == "arm64"
    row = inspect.function_list(str(rust_arm64), RUST_TICK)[0]
    code = _objdump(rust_arm64, (row["address"], row["address"] + row["size"]))
    (entry,) = plan["probes"][0]["sites"]
    assert int(entry["address"], 16) == code[0][0] and "skip" not in entry
    assert entry["values"]["n"]["regs"] == ["x1"]
    exits = plan["probes"][1]["sites"][1:]
    assert sorted(int(s["address"], 16) for s in exits) == \
        sorted(a for a, m, _ops in code if m == "ret") != []


def test_a_rust_arm64_programs_mirror_is_planned_and_its_counts_refused(
        rust_arm64: Path) -> None:
    """noop run --binary's plan: no update probe (the crate's arm64 updates are read for
    noop --binary's lines, not folded into noop run's rows), the probe where the program
    gathers its registry on the first instruction of ``Registry::gather``, the registry
    read from x0 where gdb-multiarch's reading of the DWARF puts ``self``. noop run's
    counts of every update (``--mirror both``) are refused in one line."""
    done = run("check", "--binary", rust_arm64, "--run", "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [p["name"] for p in plan["probes"]] == ["registry_gathered"]
    (site,) = plan["probes"][0]["sites"]
    gather = "prometheus::registry::Registry::gather"
    (row,) = [r for r in inspect.function_list(str(rust_arm64), gather) if r["name"] == gather]
    assert int(site["address"], 16) == row["address"] == \
        _objdump(rust_arm64, (row["address"], row["address"] + 4))[0][0]
    gdbs = dict(_entry_registers(_gdb(rust_arm64, [f"info scope *{row['address']:#x}"]),
                                 row["address"]))
    assert site["values"]["registry"]["ops"] == [{"op": "reg", "reg": "x0"}] and \
        gdbs.get("self") == ["x0"]
    done = run("run", "--binary", rust_arm64, "--mirror", "both", "--listen",
               "127.0.0.1:0", timeout=180)
    assert done.returncode == 2 and "on arm64 noop reads the update code for noop " \
        "--binary's lines only" in done.stderr and \
        len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_rust_arm64_programs_updates_are_read_after_each_outline_atomic(
        rust_arm64: Path) -> None:
    """noop --binary's plan of the Rust example on arm64, against llvm-objdump's tick:
    each call of an add helper (``bl __aarch64_ldadd8_*``) has a site on the
    instruction after it, the value x0 (the value before) plus the constant the code
    moved into w0/x0 before the call; each compare-and-swap helper's loop (``bl
    __aarch64_cas8_*; cmp x0, ..; b.ne`` back) a site after its ``b.ne``, the new bits
    in x1 and the old in x0; each 8-byte store to a metric's value a site: at a store
    of a general register (its value), after one of a D register (read back). The
    helpers the plan trusts write no register but x0, x15, x16 and x17 (their code, by
    llvm-objdump)."""
    done = run("check", "--binary", rust_arm64, "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    sites = {int(s["address"], 16): (p["name"], s) for p in plan["probes"]
             for s in p["sites"]}
    row = inspect.function_list(str(rust_arm64), RUST_TICK)[0]
    code = _objdump(rust_arm64, (row["address"], row["address"] + row["size"]))
    nm = subprocess.run(["nm", str(rust_arm64)], capture_output=True, text=True,
                        check=True).stdout
    helpers = {int(a, 16): n for a, _t, n in (x.split(" ", 2) for x in nm.splitlines()
                                              if re.search(r" __aarch64_(ldadd|cas)8_", x))}

    seen = set()
    for k, (address, mnemonic, ops) in enumerate(code):
        target = int(ops, 16) if mnemonic == "bl" and re.fullmatch(r"0x[0-9a-f]+", ops) \
            else None
        if target in helpers and \
                not _value_field(code, k, "x1" if "ldadd" in helpers[target] else "x2"):
            assert code[k + 1][0] not in sites, hex(address)  # an Arc's count
        elif target in helpers and "ldadd" in helpers[target]:
            name, s = sites[code[k + 1][0]]
            mov = next(o for _a, m, o in reversed(code[:k]) if m == "mov" and
                       o.startswith(("w0,", "x0,")))
            step = int(mov.split("#")[1], 0)
            assert s["values"]["delta"]["offset"] == step & 2**64 - 1, (hex(address), mov)
            assert (s["values"]["value"]["regs"], s["values"]["value"]["offset"]) == \
                (["x0"], step) and s["values"]["before"]["regs"] == ["x0"]
            assert name in ("counter_u64", "gauge_i64")
            seen.add(code[k + 1][0])
        elif target in helpers and "cas" in helpers[target]:
            assert code[k + 1][1:] == ("cmp", code[k + 1][2]) and \
                code[k + 1][2].startswith("x0,") and code[k + 2][1] == "b.ne" and \
                int(code[k + 2][2].split()[0], 16) < address
            name, s = sites[code[k + 3][0]]
            assert name in ("counter_f64", "gauge_f64") and \
                s["values"]["value"]["regs"] == ["x1"] and \
                s["values"]["before"]["regs"] == ["x0"]
            seen.add(code[k + 3][0])
        elif mnemonic == "str" and ops.endswith(", #152]") and ops[0] in "xd":
            at = address if ops[0] == "x" else code[k + 1][0]
            name, s = sites[at]
            assert name == ("gauge_i64" if ops[0] == "x" else "gauge_f64")
            assert s["values"]["value"]["kind"] == ("reg" if ops[0] == "x" else "mem")
            seen.add(at)
    # tick's 17 updates: 9 adds, 6 compare-and-swap loops, 2 sets
    assert len(seen) == 17 and seen == {a for a, (_n, s) in sites.items()
                                        if s["function"] == RUST_TICK}
    for address, name in helpers.items():
        body = _objdump(rust_arm64, (address, address + 64))
        end = next(n for n, (_a, m, _o) in enumerate(body) if m == "ret" and n > 3)
        body = body[:end + 4]  # both paths: the LSE one's ret, then the loop's
        written = {o.split(",")[0].strip() for _a, m, o in body
                   if m not in ("ret", "cbz", "cbnz", "b.ne", "cmp", "nop", "b")}
        assert {re.sub(r"^w", "x", w) for w in written} <= {"x0", "x15", "x16", "x17"}, \
            (name, written)


@pytest.fixture(scope="module")
def rust_arm64_lse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same for a CPU with the Large System Extensions (``+lse``): its atomics
    inlined, no outline helper."""
    return cargo_build(EXAMPLE.parent / "rust-prometheus", "prometheus-0.13.*",
                       "librust-prometheus-dev",
                       tmp_path_factory.mktemp("rust-arm64-lse") / "rust-prometheus",
                       arm64=True, rustflags=("-C", "target-feature=+lse"))


def test_a_rust_arm64_builds_inlined_lse_atomics_are_read_where_their_registers_are(
        rust_arm64_lse: Path) -> None:
    """A build whose atomics are LSE instructions inlined (``+lse``), against
    llvm-objdump's tick: each ``ldadd Xs, Xt, [Xn]`` on a metric's value is read after
    it, the value Xt + Xs, where Xt is neither Xs nor Xn, else at it, the value the
    field there plus Xs; each ``casl`` loop after its ``b.ne``, new in the casl's Xt and
    old in its Xs; each store as in the outline build: 17 updates, each with its site."""
    done = run("check", "--binary", rust_arm64_lse, "--json", timeout=180)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert RUST_TICK not in done.stderr, done.stderr  # nothing of tick said as unread
    plan = json.loads(done.stdout)
    sites = {(int(s["address"], 16), s["why"]): (p["name"], s) for p in plan["probes"]
             for s in p["sites"]}
    row = inspect.function_list(str(rust_arm64_lse), RUST_TICK)[0]
    code = _objdump(rust_arm64_lse, (row["address"], row["address"] + row["size"]))

    def site(address: int, update: int) -> dict[str, Any]:
        (got,) = [s for (a, why), (_n, s) in sites.items()
                  if a == address and f"at {update:#x}" in why]
        return got

    seen = 0
    for k, (address, mnemonic, ops) in enumerate(code):
        regs = re.findall(r"\b[xw]\d+\b|\bxzr\b", ops)
        if re.fullmatch(r"ldadd(a|al|l)?", mnemonic):
            xs, xt, xn = regs
            if not _value_field(code, k, xn):  # an Arc's count
                assert not any(a == code[k + 1][0] or a == address for a, _w in sites)
                continue
            if xt in (xs, xn):
                s = site(address, address)
                assert s["values"]["value"]["kind"] == "sum" and \
                    s["values"]["value"]["regs"] == [xs] and \
                    s["values"]["value"]["ops"] == [{"op": "reg", "reg": xn}], ops
            else:
                s = site(code[k + 1][0], address)
                assert (s["values"]["value"]["regs"], s["values"]["value"].get("formula")) \
                    == ([xt, xs], "+"), ops
            seen += 1
        elif re.fullmatch(r"cas(a|al|l)?", mnemonic):
            xs, xt, _xn = regs
            assert code[k + 1][1] == "cmp" and code[k + 1][2].startswith(f"{xs},") and \
                code[k + 2][1] == "b.ne"
            s = site(code[k + 3][0], address)
            assert (s["values"]["value"]["regs"], s["values"]["before"]["regs"]) == \
                ([xt], [xs]), ops
            seen += 1
        elif mnemonic == "str" and ops.endswith(", #152]") and ops[0] in "xd":
            site(address if ops[0] == "x" else code[k + 1][0], address)
            seen += 1
    assert seen == 17


@pytest.mark.parametrize(("code", "want"), [
    ("mov w0, #3\nadd x1, x8, #152\nbl f", (3, 1)),  # a constant, 32 bits zero-extended
    ("mov x0, #-1\nbl f", (2**64 - 1, 1)),  # dec: the constant -1
    ("mov x0, x20\nldr x1, [x19]\nbl f", ("x20", 1)),  # a register kept across the call
    ("neg x0, x21\nbl f", ("x21", -1)),  # sub of a register
    ("mov x0, x16\nbl f", None),  # a register the helper may write
    ("mov x0, x20\nmov x20, #1\nbl f", None),  # written again before the call
    ("mov w0, #1\ncbz x3, 1f\nmov w0, #2\n1: bl f", None),  # the call reached two ways
    ("mov w0, #1\nb 1f\n1: add x1, x8, #152\nbl f", None),  # x0 set in another block
])
def test_an_outline_adds_increment_is_what_the_code_put_in_x0(tmp_path: Path, code: str,
                                                               want: Any) -> None:
    """What a call of an outline add helper was passed in x0, as a probe after the call
    reads it: the constant moved there, or the register copied or negated there that
    nothing writes before the call and the helper keeps; nothing when the call or the
    instruction that set x0 is reached from elsewhere."""
    from agent.presets.rust_prometheus.arm64 import _increment

    insns = _assembled(tmp_path, code)
    call = next(n for n, i in enumerate(insns) if i.mnemonic == "bl")
    got = _increment(insns, call)
    if want is None:
        assert got is None
    else:
        fetch, sign = got
        assert ((fetch.offset if fetch.kind == "const" else fetch.regs[0]), sign) == want


@pytest.fixture(scope="module")
def rust_arm64_llsc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same built with neither outline atomics nor the Large System Extensions
    (``-outline-atomics``): its atomics inlined as exclusive load/store loops."""
    return cargo_build(EXAMPLE.parent / "rust-prometheus", "prometheus-0.13.*",
                       "librust-prometheus-dev",
                       tmp_path_factory.mktemp("rust-arm64-llsc") / "rust-prometheus",
                       arm64=True, rustflags=("-C", "target-feature=-outline-atomics"))


def _left_at(code: list[tuple[int, str, str]], k: int) -> int:
    """The index of the instruction where the exclusive loop closed by the branch at
    ``code[k]`` is left on success (a ``cbnz`` falls through, a ``cbz`` jumps), past
    any loop that begins right there."""
    _a, mnemonic, ops = code[k]
    at = {a: j for j, (a, _m, _o) in enumerate(code)}
    nxt = k + 1 if mnemonic == "cbnz" else at[int(ops.split(",")[1].split()[0], 16)]
    if code[nxt][1] in ("ldxr", "ldaxr"):
        close = next(j for j in range(nxt, len(code)) if code[j][1] in ("cbnz", "cbz"))
        return _left_at(code, close)
    return nxt


def test_a_rust_arm64_builds_exclusive_loops_are_read_where_they_are_left(
        rust_arm64_llsc: Path) -> None:
    """A build whose atomics are exclusive load/store loops inlined
    (``-outline-atomics``), against llvm-objdump's tick: each loop on a metric's value
    (``ldxr``, ``add``/``sub #imm``, ``stxr``, ``cbnz`` back) has a site where the loop
    is left, past the loops that follow it at once, its increment the immediate and
    its value the register stored less what later adds of the same field add; each
    float loop (``cbz`` on success) its site at the ``cbz``'s target, the increment the
    constant ``fmov`` put in the D register its ``fadd`` adds; a value update followed by
    a loop on another word (the labelled child's Arc dropped) read back from memory
    through the register its address was made from: 17 updates, each with its site."""
    done = run("check", "--binary", rust_arm64_llsc, "--json", timeout=180)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert RUST_TICK not in done.stderr, done.stderr  # nothing of tick said as unread
    plan = json.loads(done.stdout)
    row = inspect.function_list(str(rust_arm64_llsc), RUST_TICK)[0]
    code = _objdump(rust_arm64_llsc, (row["address"], row["address"] + row["size"]))
    sites = {(int(s["address"], 16), s["why"]): s for p in plan["probes"] for s in p["sites"]
             if s["function"] == RUST_TICK}

    def site(address: int, update: int) -> dict[str, Any]:
        (got,) = [s for (a, why), s in sites.items()
                  if a == address and f"at {update:#x}" in why]
        return got

    seen = 0
    for k, (address, mnemonic, ops) in enumerate(code):
        if mnemonic not in ("stxr", "stlxr") or not ops.startswith("w"):
            continue
        _status, stored, base = re.findall(r"\b[xw]\d+\b", ops)
        if not _value_field(code, k, base):  # an Arc's count
            assert not any(f"at {address:#x}" in why for _a, why in sites)
            continue
        head = max(j for j in range(k) if code[j][1] in ("ldxr", "ldaxr") and
                   code[j][2].endswith(f"[{base}]"))
        left = _left_at(code, k + 1)
        s = site(code[left][0], address)["values"]
        if code[k + 1][1] == "cbnz":  # an add: ldxr, add|sub #imm, stxr
            m, imm = code[head + 1][1], int(code[head + 1][2].split("#")[1], 0)
            step = imm if m == "add" else -imm
            assert s["delta"]["offset"] == step & 2**64 - 1, ops
            later = 0  # the loops after it on the same field, to where it is left
            j = k + 2
            while j < left:
                nxt = code[j + 1]
                if code[j + 2][2].endswith(f"[{base}]") and nxt[2].startswith(f"{stored},"):
                    later += int(nxt[2].split("#")[1], 0) * (1 if nxt[1] == "add" else -1)
                else:
                    later = None
                    break
                j += 4
            if later is None:  # after a loop on another word: from memory, its address
                add = next(o for _a, mm, o in reversed(code[:head])
                           if mm == "add" and o.startswith(f"{base},"))
                assert s["value"]["kind"] == "mem" and s["value"]["ops"][0] == \
                    {"op": "reg", "reg": add.split(",")[1].strip()}, ops
            else:
                assert (s["value"]["regs"], s["value"]["offset"]) == ([stored], -later), ops
        else:  # a float's: cbz to where it is left, fadd of an fmov'd constant
            fadd = next(o for _a, mm, o in code[head:k] if mm == "fadd")
            d = [r for r in re.findall(r"\bd\d+\b", fadd)[1:]
                 if not any(mm == "fmov" and o.startswith(f"{r}, x")
                            for _a, mm, o in code[head:k])]
            mm, const = next((mm, o) for _a, mm, o in reversed(code[:head])
                             if o.startswith(f"{d[0]},") and mm not in ("str", "stur"))
            if mm == "fmov" and "#" in const:  # the last write of it before the loop
                bits = struct.unpack("<Q", struct.pack("<d", float(const.split("#")[1])))[0]
                assert s["delta"]["kind"] == "const" and s["delta"]["offset"] == bits, ops
            else:
                assert s["delta"]["kind"] == "unavailable", ops
            assert s["value"]["regs"] == [stored], ops
        seen += 1
    stores = [a for a, m, o in code if m == "str" and o.endswith(", #152]")]
    for address in stores:
        assert any(f"at {address:#x}" in why for _a, why in sites)
    assert seen + len(stores) == 17 and len(sites) == 17


_F = "fmov d0, #-2.5\n1: ldar x9, [x8]\nldxr x10, [x8]\ncmp x10, x9\nb.ne 2f\n" \
    "fmov d1, x9\n{op}\nfmov x9, d1\nstlxr w10, x9, [x8]\ncbz w10, 3f\nb 1b\n2: clrex\n" \
    "b 1b\n3: mov x20, x21"
_MINUS_2_5 = struct.unpack("<Q", struct.pack("<d", -2.5))[0]


@pytest.mark.parametrize(("code", "want"), [
    # an add of an immediate, left after the cbnz; the old value gone (the same register)
    ("1: ldxr x9, [x8]\nadd x9, x9, #3\nstxr w10, x9, [x8]\ncbnz w10, 1b\nmov x20, x21",
     ("ldadd", "x9", "", 3, "", 1, None)),
    # a sub of a register into another: the old value kept
    ("1: ldaxr x9, [x8]\nsub x10, x9, x1\nstlxr w11, x10, [x8]\ncbnz w11, 1b\nmov x20, x21",
     ("ldadd", "x10", "x9", None, "x1", -1, None)),
    # the amount is the status register: gone after the store
    ("1: ldxr x9, [x8]\nadd x9, x9, x10\nstxr w10, x9, [x8]\ncbnz w10, 1b\nmov x20, x21",
     None),
    # a float's add: left at the cbz's target, the constant fmov put before the loop
    (_F.format(op="fadd d1, d1, d0"), ("cas", "x9", "", None, "", 1, _MINUS_2_5)),
    (_F.format(op="fsub d1, d1, d0"), ("cas", "x9", "", None, "", 1, _MINUS_2_5 ^ 1 << 63)),
    (_F.format(op="fadd d1, d0, d1"), ("cas", "x9", "", None, "", 1, _MINUS_2_5)),
    # the amount computed in the loop: no constant
    (_F.format(op="fmul d0, d0, d0\nfadd d1, d1, d0"), ("cas", "x9", "", None, "", 1, None)),
    # the place after the loop reached from elsewhere too
    ("cbz x3, 2f\n1: ldxr x9, [x8]\nadd x9, x9, #1\nstxr w10, x9, [x8]\ncbnz w10, 1b\n"
     "2: mov x20, x21", None),
    # a shifted immediate, a 32-bit loop, a store to another address, a pair
    ("1: ldxr x9, [x8]\nadd x9, x9, #1, lsl #12\nstxr w10, x9, [x8]\ncbnz w10, 1b\n"
     "mov x20, x21", None),
    ("1: ldxr w9, [x8]\nadd w9, w9, #1\nstxr w10, w9, [x8]\ncbnz w10, 1b\nmov x20, x21",
     None),
    ("1: ldxr x9, [x8]\nadd x9, x9, #1\nstxr w10, x9, [x7]\ncbnz w10, 1b\nmov x20, x21",
     None),
    ("1: ldxp x9, x11, [x8]\nadd x9, x9, #1\nstxp w10, x9, x11, [x8]\ncbnz w10, 1b\n"
     "mov x20, x21", None),
    # a call inside the window
    ("1: ldxr x9, [x8]\nbl f\nstxr w10, x9, [x8]\ncbnz w10, 1b\nmov x20, x21", None),
])
def test_an_exclusive_loop_is_read_where_it_is_left(tmp_path: Path, code: str,
                                                    want: Any) -> None:
    """An exclusive load/store loop assembled by binutils: its site the instruction the
    loop is left by on success (marked ``mov x20, x21``), what holds the new value, the
    old, the amount (an immediate, or a register and its sign) and a float loop's
    constant increment (f64 bits); none for what the module does not know."""
    from agent.binary.isa.arm64_loops import loop

    insns = _assembled(tmp_path, code)
    store = max(n for n, i in enumerate(insns) if i.mnemonic.startswith("st"))
    got = loop(insns, store)
    if want is None:
        assert got is None
        return
    assert got is not None and insns[got.site].operands == (("reg", "x20"), ("reg", "x21"))
    assert (got.kind, got.new, got.old, got.imm, got.amount, got.sign, got.bits) == want


_LOOP = "{l}: ldxr x9, [{b}]\nadd x9, x9, #{i}\nstxr w10, x9, [{b}]\ncbnz w10, {l}b\n"


@pytest.mark.parametrize(("code", "want"), [
    # inc(); inc_by(4): the first seen where the second is left, less the second's 4
    ("add x8, x0, #152\n" + _LOOP.format(l=1, b="x8", i=1) + _LOOP.format(l=2, b="x8", i=4)
     + "mov x20, x21", ("x9", 4, True, None)),
    # then a loop on another word (an Arc's count) that writes the address register: the
    # field read back through what it was made from
    ("add x8, x0, #152\n" + _LOOP.format(l=1, b="x8", i=1) +
     "2: ldxr x8, [x0]\nsub x8, x8, #1\nstlxr w9, x8, [x0]\ncbnz w9, 2b\nmov x20, x21",
     ("", 0, False, ("x0", 152))),
    # the second loop entered from elsewhere too: not followed
    ("add x8, x0, #152\ncbz x3, 2f\n" + _LOOP.format(l=1, b="x8", i=1) +
     _LOOP.format(l=2, b="x8", i=4) + "mov x20, x21", None),
])
def test_an_exclusive_loop_falling_into_another_is_seen_where_the_last_is_left(
        tmp_path: Path, code: str, want: Any) -> None:
    """Loops one after another (``chained``): the first's site where the last is left,
    the register with its value there plus what later adds of the same field add, and
    whether its address register survives (else what it was made from: ``rebased``)."""
    from agent.binary.isa.arm64_loops import chained, loop, rebased

    insns = _assembled(tmp_path, code)
    first = loop(insns, next(n for n, i in enumerate(insns) if i.mnemonic == "stxr"))
    assert first is not None
    seen = chained(insns, first)
    if want is None:
        assert seen is None
        return
    assert seen is not None and \
        insns[seen.site].operands == (("reg", "x20"), ("reg", "x21"))
    assert (seen.new, seen.later, seen.based, None if seen.based else
            rebased(insns, first, seen.site)) == want


@pytest.mark.parametrize("build", ["rust_arm64", "rust_arm64_lse"])
def test_a_rust_arm64_histograms_observed_value_is_the_sums_new_less_old(
        build: str, request: pytest.FixtureRequest) -> None:
    """The histogram's observed value (passed in a v register, which a uprobe cannot
    read) where ``Histogram::observe`` adds it to the shard's sum, against llvm-objdump:
    its count site kept for the thread, and a site after the sum's compare-and-swap loop
    (``bl __aarch64_cas8_*``, or an inlined ``cas``, then ``cmp``, ``b.ne`` back), the
    value new - old from the registers the swap compared and stored (x1 - x0, or the
    ``cas``'s Xt - Xs), no call between them but outline helpers, no write of sp."""
    binary: Path = request.getfixturevalue(build)
    done = run("check", "--binary", binary, "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    (probe,) = [p for p in json.loads(done.stdout)["probes"] if p["name"] == "histogram"]
    observe = "prometheus::histogram::Histogram::observe"
    (row,) = [r for r in inspect.function_list(str(binary), observe) if r["name"] == observe]
    code = _objdump(binary, (row["address"], row["address"] + row["size"]))
    nm = dict((int(a, 16), n) for a, _t, n in (x.split(" ", 2) for x in subprocess.run(
        ["nm", str(binary)], capture_output=True, text=True, check=True).stdout.splitlines()
        if " T " in x or " t " in x))
    (k,) = [k for k, (_a, m, o) in enumerate(code) if re.fullmatch(r"cas(a|al|l)?", m) or
            (m == "bl" and "__aarch64_cas8_" in nm.get(int(o.split()[0], 16), ""))]
    old, new = ("x0", "x1") if code[k][1] == "bl" else \
        tuple(re.findall(r"\bx\d+\b", code[k][2])[:2])
    assert code[k + 1][1] == "cmp" and code[k + 1][2].startswith(f"{old},") and \
        code[k + 2][1] == "b.ne"
    call, ret = probe["sites"]
    assert (call["role"], ret["role"]) == ("call", "return")
    assert int(ret["address"], 16) == code[k + 3][0]
    assert ret["values"]["observed"]["regs"] == [old, new] and \
        ret["values"]["observed"]["formula"] == "new-old"
    between = [x for x in code if int(call["address"], 16) <= x[0] <= code[k][0]]
    assert not any(o.startswith("sp,") for _a, _m, o in between)
    assert all("__aarch64_" in nm.get(int(o.split()[0], 16), "")
               for _a, m, o in between if m == "bl")
