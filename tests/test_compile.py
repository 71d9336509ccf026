"""Compiling once, loading many times: BCC compiles in a child process, what it made is
kept by the exact C text, and noop's own loader creates the maps, loads the programs
and attaches the uprobes. A kept entry must give the same answers as a fresh compile,
and a damaged one must never be trusted."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import time
from pathlib import Path

import pytest
from harness.noop import command, popen, run

from agent.binary import sites
from agent.binary.elf import ElfFile
from agent.kernel import attach, bpfsys, compile, objects, uprobes

REPO = Path(__file__).resolve().parent.parent

COUNT = """
BPF_ARRAY(hits, u64, 1);
int on_mix(struct pt_regs *ctx)
{
	int zero = 0;
	u64 *n = hits.lookup(&zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
"""


def _calls(binary: Path, text: str, times: int) -> int:
    """Attach ``text``'s on_mix at mix() of ``binary``, run it ``times`` times (one call
    of mix each), and read what the program counted."""
    from agent.plan import resolve
    sym, _ = resolve.Binary(str(binary)).functions.find("mix")
    with objects.Object(compile.compile_c(text), ["on_mix"]) as obj, \
            uprobes.Probe(str(binary), ElfFile(str(binary)).file_offset(sym.address),
                         obj.progs["on_mix"]):
        for _ in range(times):
            subprocess.run([str(binary), "run"], check=True, capture_output=True, timeout=30)
        raw = obj.maps["hits"].lookup(bytes(4))
    assert raw is not None
    return int.from_bytes(raw[:8], "little")


def test_a_kept_program_counts_as_a_fresh_one(privileged: None, c_layouts_o2: Path,
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """Compiled once (BCC in a child), then found by its text with no compiler able to
    run at all: the same program, loaded by noop's loader, counts every call."""
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    text = COUNT + f"/* {time.time_ns()} */\n"  # never compiled before
    assert compile.cached(text) is None
    assert _calls(c_layouts_o2, text, 2) == 2
    kept = compile.cached(text)
    assert kept is not None and kept.cached

    def no_compiler(*_a: object, **_k: object) -> None:
        raise AssertionError("the compiler ran for a kept program")

    monkeypatch.setattr(compile, "in_child", no_compiler)
    assert _calls(c_layouts_o2, text, 3) == 3
    assert compile.cached(text + " ") is None  # another text is another program


@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign", "not json",
                                    "map missing"])
def test_a_damaged_entry_is_compiled_again(privileged: None, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, damage: str
                                           ) -> None:
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    text = COUNT + f"/* {damage} {time.time_ns()} */\n"
    first = compile.compile_c(text)
    (entry,) = (tmp_path / "bpf").glob("*.json")
    raw = entry.read_bytes()
    doc = json.loads(raw)
    if damage == "truncated":
        entry.write_bytes(raw[: len(raw) // 2])
    elif damage == "flipped":  # one instruction changed, the digest not
        insns = bytearray(first.functions["on_mix"].insns)
        insns[0] ^= 1
        import base64
        doc["body"]["functions"]["on_mix"]["insns"] = base64.b64encode(insns).decode()
        entry.write_text(json.dumps(doc))
    elif damage == "foreign":  # a sound entry of another text under this name
        doc["key"] = "0" * 64
        entry.write_text(json.dumps(doc))
    elif damage == "not json":
        entry.write_bytes(b"\x00\x01garbage")
    else:  # sound digest, but an instruction names a map the entry does not define
        doc["body"]["maps"] = []
        import hashlib
        doc["sha256"] = hashlib.sha256(json.dumps(doc["body"], sort_keys=True).encode()
                                       ).hexdigest()
        entry.write_text(json.dumps(doc))
    assert compile.cached(text) is None
    again = compile.compile_c(text)
    assert not again.cached and again.functions == first.functions
    assert compile.cached(text) is not None  # and kept, sound, again


@pytest.mark.builds  # BCC compiles, in its child process: seconds
def test_a_compile_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    with pytest.raises(compile.CompileError, match=r"could not compile .*undeclared") as e:
        compile.compile_c("int f(struct pt_regs *ctx) { return nope; }\n")
    assert "\n" not in str(e.value)
    assert not list((tmp_path / "bpf").glob("*.json")) if (tmp_path / "bpf").exists() else True


def _programs(n: int, broken: int | None = None, lines: int = 0) -> str:
    """A text of ``n`` programs of different lengths sharing a map and a helper (each
    of at least ``lines`` lines); program ``broken`` names what does not exist."""
    out = ["#include <uapi/linux/ptrace.h>\nBPF_ARRAY(hits, u64, 16);\n"
           "static __always_inline void bump(int i)\n{\n\tu64 *n = hits.lookup(&i);\n"
           "\tif (n)\n\t\t__sync_fetch_and_add(n, 1);\n}\n"]
    for i in range(n):
        body = "".join(f"\tif (ctx->ax == {k})\n\t\tbump({k % 16});\n"
                       for k in range(max(i + 1, lines // 2)))
        out.append(f"/* program {i} */\nint p{i}(struct pt_regs *ctx)\n{{\n{body}"
                   f"\treturn {'nope' if i == broken else 0};\n}}\n")
    return "".join(out) + "/* the end */\n"


def test_a_text_is_split_between_compilers_program_by_program() -> None:
    text = _programs(11)
    assert compile.split(text, 1) == [text]
    assert compile.split(_programs(compile.SHARE * 2 - 1), 2) == \
        [_programs(compile.SHARE * 2 - 1)]  # too few programs for two compilers
    parts = compile.split(text, 3)
    assert len(parts) == 2  # 11 programs: two shares of 4 or more
    program = re.compile(r"(?ms)^int p\d+\(.*?^\}\n")
    outside = program.sub("", text)
    mine = [program.findall(part) for part in parts]
    every = [p for share in mine for p in share]
    for part in parts:
        assert program.sub("", part) == outside
    assert sorted(every) == sorted(program.findall(text))
    assert abs(sum(map(len, mine[0])) - sum(map(len, mine[1]))) < len(max(every, key=len))
    # few programs, but long ones: a compiler's start is worth their share too
    long = _programs(2, lines=compile.SHARE_LINES)
    assert len(compile.split(long, 2)) == 2
    assert compile.split(_programs(2, lines=compile.SHARE_LINES // 2 - 10), 2) == \
        [_programs(2, lines=compile.SHARE_LINES // 2 - 10)]


@pytest.mark.builds  # BCC compiles, in its child processes: seconds
def test_compilers_sharing_a_text_make_what_one_makes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    text = _programs(12)
    whole = compile.in_child(text, 1)
    assert sorted(whole.functions) == sorted(f"p{i}" for i in range(12))
    for ways in (2, 3):
        assert compile.in_child(text, ways) == whole
    broken = _programs(12, broken=7)
    with pytest.raises(compile.CompileError) as alone:
        compile.in_child(broken, 1)
    with pytest.raises(compile.CompileError) as shared:
        compile.in_child(broken, 2)
    assert "undeclared identifier 'nope'" in alone.value.message
    assert shared.value.message == alone.value.message


@pytest.mark.builds  # BCC compiles, in its child processes: seconds
@pytest.mark.parametrize("golden", ["probes-run.c", "rust_prometheus-trace.c"])
def test_user_reads_under_noop_s_name_compile_as_bcc_s(golden: str) -> None:
    """noop calls bpf_probe_read_user through a pointer of its own name (BCC's front end
    takes ~55 ms over each call by the helper's own name): the same instructions."""
    text = (Path(__file__).parent / "golden" / golden).read_text()
    assert text.count("noop_probe_read_user(") >= 3
    bccs = text.replace("noop_probe_read_user(", "bpf_probe_read_user(")
    mine, theirs = compile.in_child(text, 1), compile.in_child(bccs, 1)
    assert mine.functions and mine == theirs


def test_a_verifier_refusal_says_why(privileged: None, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A program the kernel refuses: the verifier's own last words, in one line."""
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    text = ("#include <uapi/linux/ptrace.h>\nint bad(struct pt_regs *ctx)\n{\n\tchar buf[8];\n"
            "\tbpf_probe_read_user(buf, ctx->cx, (void *)ctx->sp);\n\treturn buf[0];\n}\n")
    with pytest.raises(bpfsys.BpfError, match=r"refused program bad: .*R2") as e:
        objects.build(text, ["bad"]).close()
    assert "\n" not in str(e.value)


def test_a_locked_instruction_is_one_clear_error(privileged: None, c_layouts_o2: Path,
                                                 example: Path) -> None:
    """x86 will not put a uprobe on a LOCK-prefixed instruction (the kernel says so when
    it installs it in a process running the file): noop says so, in one line."""
    from agent.plan import resolve
    b = resolve.Binary(str(example))
    sym = b.functions.symbols["github.com/prometheus/client_golang/prometheus.(*counter).Inc"]
    insns = sites.disassemble(b.elf, sym.address, sym.size)
    locked = next(i for i in insns if i.lock)
    running = subprocess.Popen([str(example), "-listen", "127.0.0.1:0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        with objects.build(COUNT, ["on_mix"]) as obj, pytest.raises(attach.LoadError) as e:
            attach.attach_at(str(example), b.elf.file_offset(locked.address),
                         obj.progs["on_mix"], "the lock xadd")
    finally:
        running.kill()
        running.wait()
    assert "LOCK-prefixed" in str(e.value) and "\n" not in str(e.value)


def _tty_run(args: list[str], until: bytes, timeout: float = 120) -> bytes:
    """Run noop with stderr (and stdout) on a pseudo-terminal; everything it wrote up to
    ``until``."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: noop, on the terminal
        os.chdir(REPO)
        argv = command(*args)
        os.execv(argv[0], argv)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while until not in out and time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.kill(pid, 2)
        os.waitpid(pid, 0)
        os.close(fd)
    return out


def test_the_progress_line_on_a_terminal_and_not_elsewhere(
        privileged: None, example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that takes a while (a second; here from its first step, however fast
    this machine is today): a terminal sees one line, rewritten in place (carriage
    return, erase line) with each step, erased before the probes are on. A pipe sees
    none of it; noop run logs each step with how long it took."""
    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path / "cold"))
    monkeypatch.setenv("NOOP_PROGRESS_DELAY", "0")
    said = _tty_run(["--binary", str(example)], b"uprobes on")
    steps = re.findall(rb"\r\x1b\[Knoop: ([^\r\n]*?)\xe2\x80\xa6", said)
    assert steps and steps[-1].startswith(b"attaching"), said
    assert all(re.fullmatch(rb"resolving|(compiling|loading) \d+ BPF programs?"
                            rb"( \(compiled before\))?|attaching \d+ uprobes?", s)
               for s in steps), said
    assert re.search(rb"\r\x1b\[Knoop: \d+ uprobes on", said), said  # erased, then said
    piped = run("--binary", example, "--duration", "0.5", timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "\x1b" not in piped.stderr and "\r" not in piped.stderr
    assert "compiling" not in piped.stderr and "took" not in piped.stderr


def test_noop_run_logs_each_step(privileged: None, example: Path) -> None:
    proc = popen("run", "--binary", example, "--listen", "127.0.0.1:0",
                 stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "ready:" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = "".join(lines)
    assert re.search(r"^noop: resolving took \d+\.\d\ds$", text, re.M), text
    assert re.search(r"^noop: (compiling|loading) \d+ BPF programs?.* took \d+\.\d\ds$", text,
                     re.M), text
    assert re.search(r"^noop: attaching \d+ uprobes? took \d+\.\d\ds$", text, re.M), text


def test_sites_of_one_shape_share_a_program(example: Path) -> None:
    """With attach cookies (this kernel has them), the preset's sites whose programs
    differ only in their index share one, which reads the index from its cookie (a
    probe of one site reads none); the meta-metrics test checks that every update is
    still told apart by its site."""
    from agent.kernel import codegen
    from agent.presets import plans as presets
    plan = presets.plan(str(example), aggregate=True)
    shared = codegen.generate(plan, None, mode="run", cookies=True)
    alone = codegen.generate(plan, None, mode="run")
    sites = sum(len(p.sites) for p in plan.probes)
    names = {fn for _pi, _si, fn in shared.functions}
    assert len(shared.functions) == len(alone.functions) == sites
    assert len(names) < sites and shared.text.count("\nint noop_") == len(names)
    several = {fn for pi, _si, fn in shared.functions if len(plan.probes[pi].sites) > 1}
    assert shared.text.count("noop_attach_cookie(ctx)") == len(several) > 0  # one site: none
    assert "noop_attach_cookie" not in alone.text
    gauge = [fn for pi, _si, fn in shared.functions if plan.probes[pi].name == "gauge_add"]
    assert len(gauge) > 1 and len(set(gauge)) < len(gauge)
