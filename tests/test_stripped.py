"""Stripped binaries against their unstripped twins: a Go build with -ldflags='-s -w'
answers from its runtime metadata as the same build with DWARF does (functions at the
same addresses, struct layouts member for member, method parameters where the ABI puts
them), for each Go toolchain whose tables differ; and C, Rust and Go binaries whose
debug info was split off answer from the debug file as the unstripped binary does."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from harness import builds
from harness.noop import run as noop
from harness.programs import GO_TOOLCHAINS, PROGRAMS, go_build, go_toolchain

from agent.binary.dwarf.reader import open_dwarf
from agent.binary.elf import ElfFile, Symbol

REPO = Path(__file__).resolve().parent.parent
PKG = "github.com/prometheus/client_golang/prometheus"
VARIANTS = ("plain", "trimpath", "cgo-pie")
# Every toolchain plain; the oldest and the newest each way of building too (the file
# names -trimpath leaves, cgo's external linking and PIE's relocated metadata).
TWINS = [(t, "plain") for t in GO_TOOLCHAINS] + \
    [(t, v) for t in (GO_TOOLCHAINS[0], GO_TOOLCHAINS[-1]) for v in VARIANTS[1:]]


def answer(*args: str, cache: Path | None = None, env: dict[str, str] | None = None
           ) -> object:
    done = noop(*args, "--json", cache=cache, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module", params=TWINS,
                ids=lambda p: f"go{p[0]}-{p[1]}")
def twins(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, Path]:
    """The Go test program by one toolchain and one way of building, with DWARF and
    symbols, and with -ldflags='-s -w' (same source, same flags)."""
    version, variant = request.param
    go = go_toolchain(version)
    out = tmp_path_factory.mktemp(f"twins-{version}-{variant}")
    cache = tmp_path_factory.getbasetemp() / f"gocache-twins-{version}"  # shared by variants
    flags: tuple[str, ...] = ("-trimpath",) if variant == "trimpath" else ()
    cgo = variant == "cgo-pie"
    link = "-linkmode=external" if cgo else ""
    if cgo:
        flags = ("-buildmode=pie",)
    full = go_build(go, out / "full", cache, PROGRAMS / "go" / "layouts",
                    (*flags, f"-ldflags={link}"), cgo)
    stripped = go_build(go, out / "stripped", cache, PROGRAMS / "go" / "layouts",
                        (*flags, f"-ldflags={link} -s -w"), cgo)
    return full, stripped


def test_functions_equal_the_symbol_table(twins: tuple[Path, Path], tmp_path: Path) -> None:
    full, stripped = twins
    with ElfFile(stripped) as elf:
        assert not elf.has_dwarf and not elf.function_symbols()  # truly stripped
    got = answer("funcs", str(stripped), cache=tmp_path)
    assert isinstance(got, dict)
    assert got["debug"] == "Go runtime metadata (pclntab, type descriptors)"
    rows = [r for r in got["functions"] if not r.get("only_inlined")]
    symbols = _all_function_symbols(full)
    listed = {r["address"]: r for r in rows}
    # every function pclntab lists is one of the symbol table's, at its address
    for r in rows:
        sym = symbols.get(r["address"])
        assert sym is not None, r
        assert _short(r["name"]) == _short(sym.name), (r, sym)
        if not r["name"].startswith("go:"):  # the linker's markers have no pc tables
            assert r["size"] == sym.size, (r, sym)
    # and every Go function of the symbol table is listed (C code of a cgo build is not
    # in pclntab)
    go_symbols = [s for s in symbols.values() if "." in s.name and s.size and not
                  s.name.startswith(("_cgo_", "x_cgo_", "crosscall", "__"))]
    missing = [s.name for s in go_symbols if s.address not in listed]
    assert not missing, missing[:10]
    assert any(r["name"] == "main.main" for r in rows)
    # Inlined copies: at least DWARF's (pclntab also knows those inside the wrappers the
    # compiler generates, which Go's DWARF leaves out).
    truth = answer("funcs", str(full), cache=tmp_path / "full")
    assert isinstance(truth, dict)
    dwarf_counts = {r["address"]: r["inlined"] for r in truth["functions"]
                    if not r.get("only_inlined")}
    fewer = [r["name"] for r in rows if r["inlined"] < dwarf_counts.get(r["address"], 0)]
    assert not fewer, fewer[:10]
    assert sum(r["inlined"] for r in rows) >= sum(dwarf_counts.values()) > 0
    # Functions with no code of their own, only inlined copies: each Go one DWARF lists
    # is listed, with at least as many copies (pclntab writes the ·N of a type defined
    # inside a function as .N; C code of a cgo build is not in pclntab).
    only = {r["name"]: r["inlined"] for r in got["functions"] if r.get("only_inlined")}
    fewer = [(r["name"], r["inlined"], only.get(_dotted(r["name"])))
             for r in truth["functions"]
             if r.get("only_inlined") and "." in r["name"]
             and not r["name"].startswith(("_cgo_", "x_cgo_", "crosscall", "__"))
             and only.get(_dotted(r["name"]), 0) < r["inlined"]]
    assert not fewer, fewer[:10]


def _dotted(name: str) -> str:
    """A function's name as pclntab writes it: ``·`` as ``.``."""
    return name.replace("·", ".")


def _all_function_symbols(path: Path) -> dict[int, Symbol]:
    """Every function symbol by address, repeated names included (pyelftools: an
    independent reader of the symbol table)."""
    from elftools.elf.elffile import ELFFile

    out: dict[int, Symbol] = {}
    with path.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        for sym in symtab.iter_symbols():
            if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"] and \
                    sym["st_shndx"] != "SHN_UNDEF" and sym["st_size"]:
                # the function, not a linker marker at its address (go:textfipsstart)
                kept = out.get(sym["st_value"])
                if kept is None or kept.size < sym["st_size"]:
                    out[sym["st_value"]] = Symbol(sym.name, sym["st_value"], sym["st_size"])
    return out


def _short(name: str) -> str:
    """``[...]`` for every bracketed part (Go 1.19's pclntab writes generic functions'
    type arguments so), no ``.abi0`` (the symbol table marks ABI0 functions that
    pclntab cannot tell apart), no ``#N`` (noop's mark for pclntab's repeated names)."""
    name = re.sub(r"#\d+$", "", name).removesuffix(".abi0")
    out, depth = [], 0
    for c in name:
        if c == "[":
            if depth == 0:
                out.append("[...]")
            depth += 1
        elif c == "]":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def _struct_names(binary: Path) -> list[str]:
    from agent.binary.gometa.gotype import STRUCT
    from agent.binary.gometa.program import GoProgram

    with ElfFile(binary) as elf:
        program = GoProgram(elf)
        return sorted({t.name for t in program.types.all
                       if t.kind == STRUCT and t.named and t.fields})


def _same_layouts(full: Path, stripped: Path) -> int:
    """Compares every named struct with a descriptor in ``stripped`` with DWARF's layout
    in ``full``; returns how many were compared. A name DWARF does not have is a type
    defined inside a function (DWARF numbers it, T·1) or one DWARF left out."""
    from agent.errors import NotFound
    from agent.tools import inspect

    compared = 0
    for name in _struct_names(stripped):
        try:
            truth = inspect.struct_layout(str(full), name)
        except NotFound:
            continue
        got = inspect.struct_layout(str(stripped), name)
        assert got["debug"] == "Go type descriptors"
        assert (got["size"], got["members"]) == (truth["size"], truth["members"]), name
        compared += 1
    return compared


def test_layouts_equal_dwarf_member_for_member(stripped_example: Path, example: Path,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Every named struct with a descriptor in the example (client_golang's included)
    has the layout DWARF gives in the unstripped build of the same toolchain."""
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    names = _struct_names(stripped_example)
    for wanted in ("counter", "gauge", "histogram", "Desc"):
        assert f"{PKG}.{wanted}" in names
    assert _same_layouts(example, stripped_example) > 700


@pytest.mark.builds
@pytest.mark.parametrize("version", GO_TOOLCHAINS)
def test_test_program_layouts_equal_dwarf(version: str, tmp_path_factory: pytest.TempPathFactory,
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """The same for the Go test program, by every toolchain (its build cache is the
    twins', so this links and does not compile)."""
    go = go_toolchain(version)
    out = tmp_path / "b"
    cache = tmp_path_factory.getbasetemp() / f"gocache-twins-{version}"
    full = go_build(go, out / "full", cache, PROGRAMS / "go" / "layouts", ("-ldflags=",))
    stripped = go_build(go, out / "stripped", cache, PROGRAMS / "go" / "layouts",
                        ("-ldflags= -s -w",))
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / "c"))
    assert _same_layouts(full, stripped) > 500


def test_struct_says_where_the_answer_came_from(stripped_example: Path, tmp_path: Path
                                                ) -> None:
    done = noop("struct", str(stripped_example), f"{PKG}.counter", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("/* from Go type descriptors */")
    done = noop("struct", str(stripped_example), "main.order", cache=tmp_path)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert "has no type descriptor in this stripped Go binary" in done.stderr
    assert "--debuginfo" in done.stderr and "Traceback" not in done.stderr


def test_method_parameters_from_signatures(stripped_example: Path, example: Path,
                                           tmp_path: Path) -> None:
    """A method reachable through an interface: its parameters where the unstripped
    build's answer puts them, from its signature in the type metadata."""
    for method in ("(*counter).Add", "(*counter).Write", "(*histogram).Observe",
                   "(*gauge).Set"):
        fn = f"{PKG}.{method}"
        got = answer("vars", str(stripped_example), fn, cache=tmp_path)
        truth = answer("vars", str(example), fn, cache=tmp_path / "full")
        assert isinstance(got, dict) and isinstance(truth, dict)
        assert got["address"] == truth["address"]
        assert [(v["type"], v["location"]) for v in got["params"]] == \
            [(v["type"], v["location"]) for v in truth["params"]], fn
        assert [(v["type"], v["location"]) for v in got["results"]] == \
            [(v["type"], v["location"]) for v in truth["results"]], fn
        assert {v["source"] for v in got["params"] + got["results"]} == \
            {"abi (signature from type metadata)"}
    # a method no interface reaches: its receiver from its name, and the rest unknown
    got = answer("vars", str(stripped_example), f"{PKG}.(*histogram).observe", cache=tmp_path)
    assert isinstance(got, dict)
    assert [v["name"] for v in got["params"]] == ["p0"]
    assert "keeps no signature" in got["note"]


@pytest.mark.parametrize("how", ["build-id", "debuglink", "named", "debuginfod"])
@pytest.mark.parametrize("language", ["c", "rust", "go"])
def test_separate_debug_info(language: str, how: str, c_layouts: Path, rust_layouts: Path,
                             tmp_path: Path) -> None:
    """objcopy --only-keep-debug, strip, --add-gnu-debuglink: the stripped binary,
    with an empty cache each time, answers as the unstripped one does."""

    if language == "go":
        full = go_build(go_toolchain("1.19"), tmp_path / "go" / "layouts",
                        tmp_path / "gocache", PROGRAMS / "go" / "layouts",
                        ("-ldflags=-B 0x" + "5eed" * 10,))  # a GNU build-id
    else:
        full = c_layouts if language == "c" else rust_layouts
    work = tmp_path / "bin"
    work.mkdir()
    binary = work / "prog"
    debug = tmp_path / "prog.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    shutil.copy(full, binary)
    subprocess.run(["strip", "--strip-debug", "--strip-unneeded", str(binary)], check=True)
    with ElfFile(binary) as elf:
        gnu = elf.gnu_build_id
    assert gnu, "the test builds carry a GNU build-id"
    env: dict[str, str] = {"NOOP_DEBUG_DIRS": str(tmp_path / "debugroot")}
    args: tuple[str, ...] = ()
    if how == "build-id":
        place = tmp_path / "debugroot" / ".build-id" / gnu[:2] / f"{gnu[2:]}.debug"
        place.parent.mkdir(parents=True)
        shutil.copy(debug, place)
    elif how == "debuglink":
        subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(binary)],
                       check=True, cwd=tmp_path)
        shutil.copy(debug, work / "prog.debug")
    elif how == "debuginfod":
        place = tmp_path / "debuginfod" / gnu / "debuginfo"
        place.parent.mkdir(parents=True)
        shutil.copy(debug, place)
        env["DEBUGINFOD_CACHE_PATH"] = str(tmp_path / "debuginfod")
    else:
        args = ("--debuginfo", str(debug))
    fn, struct = {"c": ("finish", "job"),
                  "rust": ("layouts::take_record", "layouts::store::Record"),
                  "go": ("main.mixed", "main.Order")}[language]
    for query in (("funcs", "*"), ("struct", struct), ("vars", fn)):
        q = (*query[:1], str(full), *query[1:])
        truth = answer(*q, cache=tmp_path / "c-full")
        got = answer(query[0], str(binary), *query[1:], *args, cache=tmp_path / f"c-{query[0]}",
                     env=env)
        if isinstance(got, dict):
            said = {"build-id": "build-id", "debuglink": "debuglink", "named": "--debuginfo",
                    "debuginfod": "debuginfod"}[how]
            assert said in got.pop("debug"), query  # says how it was found
            assert isinstance(truth, dict)
            truth.pop("debug", None)
            truth.pop("file_offset", None), got.pop("file_offset", None)
        assert got == truth, query


def test_a_debug_file_of_another_build_is_refused(c_layouts: Path, c_layouts_o2: Path,
                                                  tmp_path: Path) -> None:
    binary = tmp_path / "prog"
    shutil.copy(c_layouts, binary)
    subprocess.run(["strip", "--strip-debug", str(binary)], check=True)
    other = tmp_path / "other.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(c_layouts_o2), str(other)], check=True)
    done = noop("funcs", str(binary), "--debuginfo", str(other), cache=tmp_path / "c")
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "build-id" in done.stderr and "is not the binary's" in done.stderr


def test_damaged_go_metadata_is_one_line(stripped_example: Path, tmp_path: Path) -> None:
    from agent.binary.gometa import pclntab
    from agent.binary.gometa.image import Image

    with ElfFile(stripped_example) as elf:
        at = pclntab.find_header(Image(elf))
        offset = elf.file_offset(at)
    data = bytearray(stripped_example.read_bytes())
    cases = {
        "truncated": bytes(data[:offset + 4096]),
        "corrupt": bytes(data[:offset + 8] + b"\xff" * 64 + data[offset + 72:]),
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        for query in (("funcs", str(path)), ("struct", str(path), f"{PKG}.counter")):
            done = noop(*query, cache=tmp_path / f"c-{name}")
            assert done.returncode != 0, (name, query)
            assert len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
            assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_goid_offsets_by_version_equal_dwarf(twins: tuple[Path, Path]) -> None:
    """The table a stripped build falls back on when runtime.g has no descriptor."""
    from agent.plan.binary import GOID_OFFSETS, Binary

    full, _stripped = twins
    b = Binary(str(full))
    assert b.build is not None and b.build.version in GOID_OFFSETS
    assert GOID_OFFSETS[b.build.version] == b.goid_offset


@pytest.mark.builds
def test_the_preset_refuses_update_methods_it_does_not_know(tmp_path: Path) -> None:
    """A client_golang whose counter is not updated atomically: one line, nothing
    attached, with what the build says of client_golang's version."""
    go = go_toolchain("1.19")
    src = PROGRAMS / "go" / "fakeprom"

    def make(d: Path) -> None:
        gopath = d / "gopath"
        pkg = gopath / "src" / "github.com" / "prometheus" / "client_golang" / "prometheus"
        shutil.copytree(src / "prometheus", pkg)
        main = gopath / "src" / "fake"
        shutil.copytree(src / "main", main)
        subprocess.run([str(go), "build", "-ldflags=-s -w", "-o", str(d / "fake"), "."],
                       cwd=main, env={**env, "GOPATH": str(gopath),
                                      "GOCACHE": str(builds.go_cache(go))},
                       check=True, capture_output=True)

    env = builds.environment(go, GO111MODULE="off", GOFLAGS="", GOENV="off",
                             GOTOOLCHAIN="local", CGO_ENABLED="0")
    out = builds.kept("fake", {"tool": builds.tool(str(go)), "sources": builds.tree(src),
                               "flags": ["-ldflags=-s -w"], "env": env}, make,
                      tmp_path / "fake")
    done = noop("check", "--binary", str(out), cache=tmp_path / "c")
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert "client_golang version unknown (built without module information): " \
           "(*counter).Inc has no xadd on counter.valInt" in line, line
    assert "will not guess" in line


def test_build_info_modules() -> None:
    from agent.binary.gometa import buildinfo

    info = buildinfo.parse("go1.24.11", (
        b"path\texample.com/shop/cmd/shop\n"
        b"mod\texample.com/shop\t(devel)\t\n"
        b"dep\tgithub.com/prometheus/client_golang\tv1.20.5\th1:abc=\n"
        b"dep\tgithub.com/prometheus/client_model\tv0.6.1\th1:def=\n"
        b"=>\t../client_model\t\t\n"
        b"build\tGOEXPERIMENT=noswissmap\n"))
    assert info.version == (1, 24) and info.path == "example.com/shop/cmd/shop"
    m = info.module("github.com/prometheus/client_golang/prometheus")
    assert m is not None and (m.path, m.version) == ("github.com/prometheus/client_golang",
                                                     "v1.20.5")
    m = info.module("github.com/prometheus/client_model/go")
    assert m is not None and m.version == "replaced by ../client_model"
    assert info.module("example.com/shop/internal/x") == info.main
    assert dict(info.settings)["GOEXPERIMENT"] == "noswissmap"


SIGNED = """
targets:
  t: {{binary: {binary}}}
probes:
  - name: ws
    function: main.withStrings
{ws}    values: {{s: s, n: n, t: t}}
  - name: mx
    function: main.mixed
{mx}    values: {{a: a, s: s, x: x}}
"""


def test_a_spec_gives_the_signature_the_metadata_lacks(go_layouts_119: Path,
                                                       tmp_path: Path) -> None:
    """Plain functions have no signature in the metadata: with the spec's, the stripped
    build reads each value where the unstripped build's DWARF says it is."""
    stripped = tmp_path / "layouts"
    shutil.copy(go_layouts_119, stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    plans = []
    for binary, signed in ((go_layouts_119, False), (stripped, True)):
        spec = tmp_path / f"{binary.parent.name}-{signed}.yaml"
        spec.write_text(SIGNED.format(
            binary=binary,
            ws='    signature: "func(s string, n int, t string) string"\n' if signed else "",
            mx='    signature: "func(a int, s string, x float64) (int, error)"\n'
            if signed else ""))
        got = answer("check", "--config", str(spec), cache=tmp_path / f"c-{signed}")
        assert isinstance(got, dict)
        plans.append(got)
    truth, got = plans
    assert got["targets"][0]["debug"].endswith("signatures from the spec")
    assert got["targets"][0]["goid_offset"] == truth["targets"][0]["goid_offset"] > 0
    assert [(p["name"], p["values"], [(s["address"], s["values"]) for s in p["sites"]])
            for p in got["probes"]] == \
        [(p["name"], p["values"], [(s["address"], s["values"]) for s in p["sites"]])
         for p in truth["probes"]]


@pytest.mark.parametrize(("signature", "says"), [
    ("func(s string, n int", "is not a Go function type: its brackets do not close"),
    ("func(s string, n, t)", "has no type"),
    ("func(o main.Order)", "no type descriptor for main.Order"),
])
def test_a_bad_signature_is_one_line(go_layouts_119: Path, tmp_path: Path, signature: str,
                                     says: str) -> None:
    stripped = tmp_path / "layouts"
    shutil.copy(go_layouts_119, stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SIGNED.format(binary=stripped, ws=f"    signature: {json.dumps(signature)}\n",
                                  mx=""))
    done = noop("check", "--config", str(spec), cache=tmp_path / "c")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert any(says in line for line in lines), done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_each_value_the_metadata_cannot_give_is_one_line(go_layouts_119: Path,
                                                          tmp_path: Path) -> None:
    stripped = tmp_path / "layouts"
    shutil.copy(go_layouts_119, stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
targets:
  t: {{binary: {stripped}}}
probes:
  - name: plain
    function: main.withStrings
    values: {{s: s}}
  - name: opaque
    function: main.mixed
    signature: "func(o *main.Order, s string, x float64) (int, error)"
    values: {{id: o.ID, o: o}}
""")
    done = noop("check", "--config", str(spec), cache=tmp_path / "c")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert ":7:" in lines[0] and "keeps no signature of it" in lines[0]
    assert "signature:" in lines[0]  # what to do
    assert ":11:" in lines[1] and "main.Order, which has no type descriptor" in lines[1]


def _without_section_headers(src: Path, dst: Path) -> None:
    """A copy whose ELF header says it has no section headers: only program headers
    and the bytes they map are left to read."""
    data = bytearray(src.read_bytes())
    data[0x28:0x30] = bytes(8)  # e_shoff
    data[0x3C:0x40] = bytes(4)  # e_shnum, e_shstrndx
    dst.write_bytes(bytes(data))
    dst.chmod(0o755)


def test_no_section_headers_at_all(stripped_example: Path, example: Path,
                                   tmp_path: Path) -> None:
    """pclntab, the module data and build info are found by their bytes and pointers."""
    bare = tmp_path / "bare"
    _without_section_headers(stripped_example, bare)
    got = answer("funcs", str(bare), f"{PKG}.(*counter).*", cache=tmp_path / "c")
    truth = answer("funcs", str(example), f"{PKG}.(*counter).*", cache=tmp_path / "t")
    assert isinstance(got, dict) and isinstance(truth, dict)
    assert got["go_version"] == truth["go_version"]
    assert [(r["name"], r["address"]) for r in got["functions"]] == \
        [(r["name"], r["address"]) for r in truth["functions"]]
    layout = answer("struct", str(bare), f"{PKG}.counter", cache=tmp_path / "c")
    truth = answer("struct", str(example), f"{PKG}.counter", cache=tmp_path / "t")
    assert isinstance(layout, dict) and isinstance(truth, dict)
    assert layout["members"] == truth["members"]


def test_a_descriptor_pointing_outside_is_one_line(stripped_example: Path,
                                                   tmp_path: Path) -> None:
    from agent.binary.gometa.program import GoProgram

    with ElfFile(stripped_example) as elf:
        program = GoProgram(elf)
        counter = program.type_named(f"{PKG}.counter")
        assert counter is not None
        fields = program.image.pointer(counter.address + 48 + 8)
        if program.image.relocations:
            pytest.fail("the stripped example is not expected to be position-independent")
        at = elf.file_offset(fields + 8)  # the first field's type pointer
    data = bytearray(stripped_example.read_bytes())
    data[at:at + 8] = (0x7FFF_0000_0000).to_bytes(8, "little")
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    # noop funcs reads no type descriptor (its listing is pclntab's): it answers.
    assert noop("funcs", str(bad), cache=tmp_path / "f").returncode == 0
    for query in (("struct", str(bad), f"{PKG}.counter"),
                  ("vars", str(bad), f"{PKG}.(*counter).Inc")):
        done = noop(*query, cache=tmp_path / "c")
        assert done.returncode != 0, query
        (line,) = done.stderr.strip().splitlines()
        assert "outside" in line and "Traceback" not in line, line




def test_types_found_by_name_are_those_of_every_type(twins: tuple[Path, Path]) -> None:
    """A type found by its name alone (a binary search in typelinks, a pointer's
    element, a package named other than its path) is the one reading every descriptor
    names so; a name no descriptor has is None."""
    from agent.binary.gometa.gotype import POINTER
    from agent.binary.gometa.program import GoProgram

    _full, stripped = twins
    with ElfFile(stripped) as elf:
        every = {}
        for t in GoProgram(elf).types.all:
            if re.fullmatch(r"\*?[\w.~/-]+\.\w+", t.name) and \
                    (t.named or (t.kind == POINTER and t.elem is not None and t.elem.named)):
                every.setdefault(t.name, t.address)
        types = GoProgram(elf).types
        assert len(every) > 1000
        assert {n: getattr(types.find(n), "address", None) for n in every} == every
        # found without reading every descriptor, where typelinks are (to Go 1.26)
        assert ("all" in types.__dict__) == (not types.md.typelinks)
        assert types.find(f"{PKG}.noSuchType") is None
        assert types.find(f"*{PKG}.noSuchType") is None


def test_inlining_trees_compared_by_name_offset(twins: tuple[Path, Path]) -> None:
    """The functions whose inlining trees hold a wanted name, found by comparing name
    offsets, are those found by decoding every tree, for a package and for all."""
    from agent.binary.gometa.program import GoProgram

    _full, stripped = twins
    with ElfFile(stripped) as elf:
        program = GoProgram(elf)
        funcs = [f.func for f in program.functions]
        gofunc = program.module.gofunc
        trees = {f.offset: [n.name.replace("·", ".") for n in
                            program.pclntab.inline_tree(f, gofunc)] for f in funcs}
        for wanted in (lambda n: n.startswith(PKG + "."), lambda n: n.startswith("strconv."),
                       lambda _n: True):
            truth = {o for o, names in trees.items() if any(map(wanted, names))}
            assert truth
            got = {f.offset for f in program.pclntab.inliners(funcs, wanted, gofunc)}
            assert got == truth


@pytest.mark.parametrize("aggregate", [False, True], ids=["trace", "run"])
def test_the_preset_from_its_scope_equals_it_from_all_metadata(
        stripped_example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        aggregate: bool) -> None:
    """The preset's plan from DWARF made for its scope alone (its package, the
    functions it is inlined into, its structs) is the plan from DWARF made of every
    function and type, and the scope's DWARF is the smaller."""
    from agent.binary import debuginfo
    from agent.plan import plain
    from agent.presets import plans as presets
    from agent.presets.client_golang import facts as client_golang

    plans = []
    for scope in (client_golang.SCOPE, None):
        monkeypatch.setattr(client_golang, "SCOPE", scope)
        monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / str(scope is None)))
        plans.append(plain.dump(presets._make(str(stripped_example), aggregate,
                                              debuginfo.NOTHING)))
    assert plans[0] == plans[1]
    assert plans[0]["probes"]
    scoped, whole = (sum(f.stat().st_size for f in (tmp_path / str(w) / "gometa").iterdir())
                     for w in (False, True))
    assert scoped * 4 < whole
    # Every function has a symbol; those whose code the scope's DWARF writes (their
    # subprograms) have their own sizes, the others reach to the next function.
    symbols = []
    for w in (False, True):
        (made,) = (tmp_path / str(w) / "gometa").iterdir()
        with ElfFile(made) as elf:
            symbols.append({s.address: s.size for s in elf.function_symbols()})
    written = {d.attributes["DW_AT_low_pc"].value
               for cu in open_dwarf(next((tmp_path / "False" / "gometa").iterdir())).units
               for d in cu.iter_DIEs()
               if d.tag == "DW_TAG_subprogram" and "DW_AT_low_pc" in d.attributes}
    entries = sorted(symbols[1])
    assert set(symbols[0]) == set(symbols[1]) and written
    for here, after in zip(entries, [*entries[1:], None], strict=True):
        if here in written:
            assert symbols[0][here] == symbols[1][here], hex(here)
        elif after is not None:
            assert symbols[0][here] == after - here >= symbols[1][here], hex(here)


def test_a_pattern_s_scope() -> None:
    from agent.binary.gometa.scope import Scope, of_pattern

    assert of_pattern("a.(*T).M") == Scope(functions=("a.(*",))  # fnmatch's * in (*T)
    assert of_pattern("a.b") == Scope(functions=("a.b",))
    assert of_pattern("a.b?c") == Scope(functions=("a.b*",))
    assert of_pattern("*.Inc") is None and of_pattern("") is None
    s = of_pattern("a.(*")
    assert s is not None and s.wants_function("a.(x).M") and not s.wants_function("b.(x)")


def test_funcs_from_metadata_list_what_its_dwarf_lists(twins: tuple[Path, Path],
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``noop funcs`` on a stripped Go binary lists every function and its inlined
    copies straight from the metadata: the rows the DWARF made from all of it gives
    (a pattern filters them)."""
    from agent.binary.dwarf.reader import Dwarf
    from agent.binary.dwarf.types import TypeNamer
    from agent.tools import inspect

    _full, stripped = twins
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    inspect.close()
    got = inspect.function_list(str(stripped))
    assert not (tmp_path / "gometa").exists()  # no DWARF made for it
    with ElfFile(stripped) as elf:
        dwarf = Dwarf(elf)
        truth = inspect.listing(dwarf, TypeNamer(dwarf))
        dwarf.close()
    assert got == truth
    assert any(r["inlined"] for r in got) and any(r.get("only_inlined") for r in got)
    pattern = f"{PKG}.(*counter).*"
    assert inspect.function_list(str(stripped), pattern) == \
        [r for r in truth if fnmatch.fnmatchcase(r["name"], pattern)] != []


def test_a_spec_from_its_scope_equals_it_from_all_metadata(
        stripped_example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec's plan for a stripped Go binary from DWARF made for what its probes read
    (the functions they name, those their patterns' literal beginnings begin, with
    every function these are inlined into, and the types asserted) is the plan from
    DWARF made of all metadata."""
    from agent.config import probes as spec
    from agent.plan import plain, resolve

    conf = tmp_path / "probes.yaml"
    conf.write_text(f"""version: 1
targets:
  t: {{binary: {stripped_example}}}
probes:
  - name: add
    function: {PKG}.(*counter).Add
    values: {{v: p1, bits: p0.valBits, g: $goid}}
  - name: gauges
    match: "{PKG}.(*gauge).*"
  - name: inc_exit
    function: {PKG}.(*counter).Inc
    at: exit
""")
    plans = []
    for scoped in (True, False):
        if not scoped:
            monkeypatch.setattr(resolve, "_scope", lambda _probes: None)
        monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / str(scoped)))
        plans.append(plain.dump(resolve.resolve(spec.load(str(conf)))))
    assert plans[0] == plans[1]
    assert len(plans[0]["probes"]) == 3
    made = [sum(f.stat().st_size for f in (tmp_path / str(s) / "gometa").iterdir())
            for s in (True, False)]
    assert made[0] * 4 < made[1]


def test_a_spec_s_scope() -> None:
    """Line probes and patterns without a literal beginning read all of it."""
    from agent.config.model import Probe, Value
    from agent.config.reader import Mark
    from agent.plan.resolve import _scope

    mark = Mark("probes.yaml", 1, 1)

    def probe(**kw: object) -> Probe:
        base: dict[str, object] = {"name": "p", "target": "t", "function": None,
                                   "match": None, "values": (), "mark": mark,
                                   "function_mark": mark}
        return Probe(**{**base, **kw})  # type: ignore[arg-type]

    got = _scope([probe(function="a.F", values=(Value("x", "p0.(*b.T).f", None, 8, mark),)),
                  probe(match="c.(*G).*")])
    assert got is not None and got.functions == ("a.F", "c.(*")
    assert {"*b.T", "b.T", "runtime.g"} <= set(got.types)
    assert _scope([probe(match="*.Inc")]) is None
    assert _scope([probe(function="a.F", values=(Value("c", "$caller", None, 8, mark),))]) \
        is None
    assert _scope([probe(function="a.F", line="a.go:3")]) is None
