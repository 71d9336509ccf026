"""Bad input of every class a campaign of malformed specs, damaged binaries and bad
flags found: each is one line that says what was wrong and what to do (exit code 2
for a command line or spec noop cannot use, 1 for a binary it cannot read), never a
traceback, never an "internal error", and never accepted as if it were fine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from harness.noop import one_line_each
from harness.programs import NoopRun

SPEC = """\
version: 1
targets:
  ex: {{binary: {binary}}}
probes:
  - name: p
{probe}"""


def _refused(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """The one line noop said, after checking it refused with ``code``."""
    assert done.returncode == code, (done.returncode, done.stderr)
    (line,) = one_line_each(done.stderr)
    assert line.startswith("noop") and "internal error" not in line, line
    for w in words:
        assert w in line, line
    return line


def _zero_section(path: Path, name: str) -> None:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(rf"\s{re.escape(name)}\s+\S+\s+\w+\s+(\w+)\s+(\w+)", out)
    assert m, out
    with open(path, "r+b") as f:
        f.seek(int(m.group(1), 16))
        f.write(bytes(int(m.group(2), 16)))


def test_a_spec_with_a_nul_byte(noop: NoopRun, example: Path, tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC.format(binary=example, probe="    function: main.main\x00\n"))
    _refused(noop("check", "--config", spec), 2, "p.yaml:6:", "U+0000", "not allowed")


def test_an_index_past_64_bits(noop: NoopRun, example: Path, tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC.format(binary=example, probe="    function: main.placeOrder\n"
                                "    values: {sku: 'o.Items[18446744073709551617].SKU'}\n"))
    _refused(noop("check", "--config", spec), 2, "is past 2147483647")


@pytest.mark.parametrize("size", [10, 5000])
def test_a_truncated_binary(noop: NoopRun, example: Path, tmp_path: Path, size: int) -> None:
    """Cut short: truncated, never "stripped" (which it is not)."""
    cut = tmp_path / "cut"
    cut.write_bytes(example.read_bytes()[:size])
    line = _refused(noop("funcs", cut), 1, "truncated")
    assert "stripped" not in line


def test_damaged_debug_info(noop: NoopRun, c_layouts: Path, tmp_path: Path) -> None:
    """.debug_info zeroed: said in one line, not an assertion inside pyelftools; and the
    cache, which answered for the intact copy of the same build-id, does not answer
    for the damaged one."""
    copy = tmp_path / "layouts"
    shutil.copy(c_layouts, copy)
    assert noop("struct", copy, "struct job").returncode == 0  # cached, by build-id
    _zero_section(copy, ".debug_info")
    _refused(noop("struct", copy, "struct job"), 1, "debug info is damaged")
    _refused(noop("funcs", copy), 1, "debug info is damaged")


@pytest.mark.builds  # an object file and a shared library, built here
def test_an_object_file_and_a_shared_library(noop: NoopRun, tmp_path: Path) -> None:
    src = tmp_path / "f.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    obj, lib = tmp_path / "f.o", tmp_path / "libf.so"
    subprocess.run(["gcc", "-g", "-c", "-o", obj, src], check=True)
    subprocess.run(["gcc", "-g", "-shared", "-fPIC", "-o", lib, src], check=True)
    _refused(noop("vars", obj, "f"), 1, "an object file", "linked into")
    done = noop("vars", lib, "f")
    assert done.returncode == 0 and re.search(r"param\s+x\s+int\s+rdi", done.stdout), done


@pytest.mark.parametrize("listen,words", [
    ("127.0.0.1:\u0669\u0660\u0669\u0660", ("expected HOST:PORT",)),  # Arabic-Indic digits
    ("[::1:9559", ("expected HOST:PORT",)),
    ("::1:9559", ("expected HOST:PORT",)),
    ("127.0.0.1:65536", ("expected HOST:PORT",)),
    ("no-such-host.invalid:9559", ("does not resolve", "check the host name")),
])
def test_listen(noop: NoopRun, example: Path, listen: str, words: tuple[str, ...]) -> None:
    """Refused before anything is resolved or attached."""
    done = noop("run", "--binary", example, "--listen", listen, timeout=60)
    _refused(done, 2, *words)


@pytest.mark.parametrize("pid", ["0", "-1", "99999999999999999999999", "4194305", "12a"])
def test_pid_that_cannot_be_one(noop: NoopRun, example: Path, pid: str) -> None:
    _refused(noop("--binary", example, "--pid", pid, "--duration", "1"), 2,
             "is not a process ID")


@pytest.mark.parametrize("command", [("--duration", "1"), ("check",), ("check", "--run")])
def test_pid_that_does_not_run_the_target(noop: NoopRun, privileged: None, example: Path,
                                          command: tuple[str, ...]) -> None:
    """This test's own process runs Python, not the example: the trace, and noop check
    (which would print a plan for it), refuse it alike."""
    flags = command if command[0] != "check" else command[1:]
    head = ("check",) if command[0] == "check" else ()
    _refused(noop(*head, "--binary", example, "--pid", str(os.getpid()), *flags), 2,
             f"process {os.getpid()} does not run {example}")


def _kernel_thread() -> int:
    """A kernel thread's PID (its flags in /proc/PID/stat have PF_KTHREAD)."""
    for entry in sorted(Path("/proc").iterdir(), key=lambda p: p.name):
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[6]) & 0x00200000:  # PF_KTHREAD; fields from the state on
                return int(entry.name)
    raise AssertionError("no kernel thread in /proc")


@pytest.mark.parametrize("command", [("--duration", "1"), ("check",), ("check", "--run")])
def test_pid_of_a_kernel_thread(noop: NoopRun, privileged: None, example: Path,
                                command: tuple[str, ...]) -> None:
    """A process whose program cannot be read (a kernel thread has none)."""
    pid = _kernel_thread()
    flags = command if command[0] != "check" else command[1:]
    head = ("check",) if command[0] == "check" else ()
    _refused(noop(*head, "--binary", example, "--pid", str(pid), *flags), 2,
             f"process {pid} does not run {example}", "cannot be read")


def _free_pid() -> int:
    top = int(Path("/proc/sys/kernel/pid_max").read_text())
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    near = {(last + k) % top for k in range(2048)}  # the next ones to be given
    return next(p for p in range(top - 1, 1, -1)
                if p not in near and not Path(f"/proc/{p}").exists())


@pytest.mark.parametrize("command", [(), ("check",)])
def test_pid_that_is_no_process(noop: NoopRun, example: Path, command: tuple[str, ...]
                                ) -> None:
    """A PID no process has: the highest below the kernel's limit with no process now,
    away from the PIDs the kernel hands out next (after the last it gave, which wraps
    around to low ones once the limit is reached: a long run does)."""
    pid = str(_free_pid())
    _refused(noop(*command, "--binary", example, "--pid", pid,
                  *(() if command else ("--duration", "1"))), 2, f"no process {pid}")


@pytest.mark.parametrize("seconds", ["-1", "0", "nan", "inf", "1e400"])
def test_duration_must_be_positive(noop: NoopRun, example: Path, seconds: str) -> None:
    _refused(noop("--binary", example, "--duration", seconds), 2,
             "is not a positive number of seconds")


def test_a_glob_past_its_limit(noop: NoopRun, example: Path, tmp_path: Path) -> None:
    """match: '*' on the example (12 000 functions) is refused at once, with the count
    and how to narrow it; so is any pattern past max_sites."""
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC.format(binary=example, probe="    match: '*'\n"))
    _refused(noop("check", "--config", spec, timeout=60), 2,
             "match '*' matches", "more than max_sites (200)", "narrow the pattern")
    spec.write_text(SPEC.format(binary=example, probe="    match: 'main.*'\n"
                                "    max_sites: 2\n"))
    _refused(noop("check", "--config", spec), 2, "more than max_sites (2)")


def test_a_globs_repeated_errors_fold(noop: NoopRun, example: Path, tmp_path: Path) -> None:
    """A value most matched functions lack: one line for all of them, with the count."""
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC.format(binary=example, probe="    match: 'runtime.s*'\n"
                                "    max_sites: 5000\n    values: {x: x}\n"))
    done = noop("check", "--config", spec, timeout=120)
    assert done.returncode == 2
    lines = one_line_each(done.stderr)
    assert len(lines) < 12, done.stderr
    folded = [x for x in lines if "<function> has no parameter 'x', for " in x]
    assert len(folded) == 1 and int(re.search(r"for (\d+) functions", folded[0]).group(1)) \
        > 100, done.stderr  # type: ignore[union-attr]


def test_a_glob_probes_what_it_can(noop: NoopRun, noop_json: NoopRun, example: Path,
                                   tmp_path: Path) -> None:
    """Functions a pattern matches that cannot be probed (inlined-only copies whose first
    instruction is a loop's target) are left out with one warning for the lot; the
    others are probed. Named alone, such a function is refused."""
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC.format(binary=example, probe="    match: 'strconv.*'\n"
                                "    max_sites: 2000\n"))
    plan = noop_json("check", "--config", spec, "--json")
    (probe,) = plan["probes"]
    left = [u for u in probe["unseen"] if u.startswith("left out: ")]
    assert len(left) == 1 and "exists only inlined" in left[0], probe["unseen"]
    first = re.search(r"the first: (\S+)\)", left[0]) or \
        re.match(r"left out: (\S+) exists only inlined", left[0])
    assert first is not None and len(probe["sites"]) > 100, left
    probed = {s["function"] for s in probe["sites"]}
    assert first.group(1) not in probed
    done = noop("check", "--config", spec, timeout=120)
    assert done.returncode == 0
    assert sum("left out: " in x for x in one_line_each(done.stderr)) == 1, done.stderr
    spec.write_text(SPEC.format(binary=example,
                                probe=f"    function: '{first.group(1)}'\n"))
    _refused(noop("check", "--config", spec, timeout=120), 2, "exists only inlined",
             "probe the functions it is inlined into")


@pytest.mark.builds  # a C program with an assembly function, built here
def test_a_glob_skips_functions_without_debug_info(noop_json: NoopRun, tmp_path: Path
                                                   ) -> None:
    """An assembly function a pattern matches is left out with a warning, not an
    error: the C functions it matches are probed."""
    (tmp_path / "m.c").write_text("int work_c(int x) { return x * 2; }\n"
                                  "int work_asm(int);\n"
                                  "int main(void) { return work_c(1) + work_asm(2); }\n")
    (tmp_path / "a.s").write_text(".globl work_asm\n.type work_asm, @function\n"
                                  "work_asm:\n\tmov %edi, %eax\n\tret\n"
                                  ".size work_asm, .-work_asm\n"
                                  '.section .note.GNU-stack,"",@progbits\n')
    binary = tmp_path / "prog"
    # The assembly without -g (GNU as would describe work_asm in DWARF with it).
    subprocess.run(["gcc", "-c", "-o", tmp_path / "a.o", tmp_path / "a.s"], check=True)
    subprocess.run(["gcc", "-g", "-O1", "-o", binary, tmp_path / "m.c", tmp_path / "a.o"],
                   check=True)
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC.format(binary=binary, probe="    match: 'work_*'\n"))
    plan = noop_json("check", "--config", spec, "--json")
    (probe,) = plan["probes"]
    assert [s["function"] for s in probe["sites"]] == ["work_c"]
    assert any("work_asm" in u and "no debug info" in u for u in probe["unseen"])


SPLIT_SOURCE = """\
struct pt { int x; long y; };
__attribute__((noinline)) int work(struct pt *p, int k) { return p->x * k + (int)p->y; }
int main(int argc, char **argv) { struct pt p = {argc, 2}; (void)argv; return work(&p, 3); }
"""
# How a program's DWARF gets split into .dwo files: by compiler and DWARF version, and
# with the .dwo gone (copied without it).
SPLITS = {"gcc-dwarf5": ("gcc", "-gdwarf-5"), "gcc-dwarf4": ("gcc", "-gdwarf-4"),
          "clang": ("clang", "-gdwarf-5"), "dwo-missing": ("gcc", "-gdwarf-5")}
ASKS = {"funcs": ("funcs", "BIN"), "vars": ("vars", "BIN", "work"),
        "struct": ("struct", "BIN", "struct pt"), "lines": ("lines", "BIN", "work"),
        "check": ("check", "--config", "SPEC")}


@pytest.mark.builds  # C programs built with -gsplit-dwarf here
@pytest.mark.parametrize("how", sorted(SPLITS))
def test_split_dwarf_is_named(noop: NoopRun, tmp_path: Path, how: str) -> None:
    """A binary whose DWARF is split into .dwo files (which noop does not read) is
    named as such by every command, with the .dwo and whether it is there, never
    taken for one without DWARF for a function."""
    cc, version = SPLITS[how]
    (tmp_path / "m.c").write_text(SPLIT_SOURCE)
    binary = tmp_path / "prog"
    subprocess.run([cc, "-g", version, "-gsplit-dwarf", "-O1", "-o", binary, "m.c"],
                   cwd=tmp_path, check=True)
    dwo = [p for p in tmp_path.iterdir() if p.suffix == ".dwo"]
    assert len(dwo) == 1, list(tmp_path.iterdir())
    if how == "dwo-missing":
        dwo[0].unlink()
    spec = tmp_path / "p.yaml"
    spec.write_text(SPEC.format(binary=binary, probe="    function: work\n"))
    for args in ASKS.values():
        line = _refused(noop(*[str(binary) if a == "BIN" else str(spec) if a == "SPEC"
                               else a for a in args]), 1 if args[0] != "check" else 2,
                        "its DWARF is split (-gsplit-dwarf)", dwo[0].name,
                        "not found" if how == "dwo-missing" else "beside it")
        assert "without -gsplit-dwarf" in line


@pytest.mark.builds
def test_partly_split_dwarf_is_a_warning(noop: NoopRun, tmp_path: Path) -> None:
    """One unit split, another not: the other's functions are probed, with a warning
    that names the split unit's .dwo."""
    (tmp_path / "m.c").write_text(SPLIT_SOURCE)
    (tmp_path / "w.c").write_text("int other(int a) { return a + 1; }\n")
    subprocess.run(["gcc", "-g", "-gsplit-dwarf", "-O1", "-c", "m.c"], cwd=tmp_path,
                   check=True)
    subprocess.run(["gcc", "-g", "-O1", "-c", "w.c"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "-o", "prog", "m.o", "w.o"], cwd=tmp_path, check=True)
    done = noop("vars", tmp_path / "prog", "other")
    assert done.returncode == 0, done.stderr
    assert "param  a    int  rdi[4]" in done.stdout
    (line,) = one_line_each(done.stderr)
    assert "1 of its 2 DWARF units are split" in line and "m.dwo" in line, line
