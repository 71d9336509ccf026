"""Float arguments read through a kernel helper for XMM registers, when there is one.

No kernel here has such a helper (the known one, the kfunc bpf_get_fp_reg, is out of
tree), so what can run does: the plan a helper would get (float arguments read where
they are passed, no fallback), the C calling it, and the loader's linking of that call
to a kernel function, run for real on this kernel with functions it does have: a
kfunc (BTF id) and a helper of the same shape (dst, size, third argument).
Privileged where it loads BPF.
"""

from __future__ import annotations

import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from agent.binary.elf import ElfFile
from agent.config import probes as spec
from agent.kernel import codegen, kfeatures, prelude, ringbuf
from agent.plan import resolve

MIX = """
targets: {c: {binary: BINARY}}
probes:
  - name: mix
    function: mix
    values: {x: x, n: n, y: y}
"""


def _plan(binary: Path, xmm_readable: bool) -> resolve.Plan:
    return resolve.resolve(spec.parse(MIX.replace("BINARY", str(binary)), "<mix>"),
                           xmm_readable)


def test_a_helper_reads_floats_where_they_are_passed(c_layouts_o2: Path) -> None:
    """mix(double x, int n, float y, ...) at -O2: x in xmm0, y in xmm1. With a helper
    the probe sits at the entry and reads both registers through it; without one the
    same spec names them unreadable and reads n alone."""
    (probe,) = _plan(c_layouts_o2, True).probes
    (site,) = probe.sites
    sym, _ = resolve.Binary(str(c_layouts_o2)).functions.find("mix")
    assert site.address == sym.address
    assert "x, y read from XMM registers through the kernel's helper" in site.why
    assert [f.regs for f in site.fetches] == [("xmm0",), ("rdi",), ("xmm1",)]
    with_helper = codegen.generate(_plan(c_layouts_o2, True), "bpf_get_fp_reg")
    assert with_helper.calls == {prelude.XMM_CALL: "bpf_get_fp_reg"}
    assert with_helper.unreadable == {(0, 0): {}}
    text = with_helper.text
    assert f"noop_xmm_read)(void *dst, u32 size, u32 regno) = (void *){prelude.XMM_CALL:#x}" \
        in text
    assert "noop_xmm_read(&x, 8, 0)" in text and "noop_xmm_read(&x, 8, 1)" in text
    without = codegen.generate(_plan(c_layouts_o2, True), None)
    assert "noop_xmm_read" not in without.text and not without.calls
    assert set(without.unreadable[(0, 0)]) == {"x", "y"}
    assert "no BPF helper to read XMM registers" in without.unreadable[(0, 0)]["x"]


def test_call_of_names_helpers_by_number_and_kfuncs_by_btf_id() -> None:
    facts = kfeatures.BtfFacts(frozenset({"bpf_get_fp_reg", "other"}),
                               frozenset({"bpf_get_fp_reg"}), True,
                               frozenset({"BPF_FUNC_probe_read_user"}),
                               {"bpf_get_fp_reg": 7, "other": 8},
                               {"BPF_FUNC_probe_read_user": 112})
    assert kfeatures.call_of("bpf_get_fp_reg", facts) == (kfeatures.BPF_PSEUDO_KFUNC_CALL, 7)
    assert kfeatures.call_of("bpf_probe_read_user", facts) == (0, 112)
    assert kfeatures.call_of("other", facts) is None  # a function, not a kfunc
    assert kfeatures.call_of("missing", facts) is None


def _run(binary: Path, times: int) -> None:
    for _ in range(times):
        subprocess.run([str(binary), "run"], check=True, capture_output=True, timeout=30)


def test_a_linked_kfunc_call_loads_and_runs(privileged: None, c_layouts_o2: Path) -> None:
    """Two stand-in calls linked to this kernel's kfuncs bpf_rcu_read_lock/unlock (by
    their BTF ids): the verifier takes the program and it counts every call of mix."""
    from agent.kernel import objects, uprobes
    from agent.kernel.compile import compile_c
    facts = kfeatures.vmlinux_btf()
    assert facts is not None, "this test needs the kernel's BTF"
    lock, unlock = (kfeatures.call_of(n, facts) for n in ("bpf_rcu_read_lock",
                                                          "bpf_rcu_read_unlock"))
    assert lock and unlock and lock[0] == unlock[0] == kfeatures.BPF_PSEUDO_KFUNC_CALL
    text = """
static void (*stand_in_lock)(void) = (void *)0x6e6f6f01;
static void (*stand_in_unlock)(void) = (void *)0x6e6f6f02;
BPF_ARRAY(hits, u64, 1);
int on_mix(struct pt_regs *ctx)
{
	int zero = 0;
	stand_in_lock();
	u64 *n = hits.lookup(&zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	stand_in_unlock();
	return 0;
}
"""
    sym, _ = resolve.Binary(str(c_layouts_o2)).functions.find("mix")
    compiled = compile_c(text)
    code = bytearray(compiled.functions["on_mix"].insns)
    assert objects.link_calls(code, {0x6E6F6F01: lock, 0x6E6F6F02: unlock}) == 2
    calls = [struct.unpack_from("<BBhi", code, at) for at in range(0, len(code), 8)
             if code[at] == 0x85]
    assert [(c[1] >> 4, c[3]) for c in calls if c[1] >> 4] == [lock, unlock]
    obj = objects.Object(compiled, ["on_mix"], {0x6E6F6F01: lock, 0x6E6F6F02: unlock})
    try:
        offset = ElfFile(str(c_layouts_o2)).file_offset(sym.address)
        with uprobes.Probe(str(c_layouts_o2), offset, obj.progs["on_mix"]):
            _run(c_layouts_o2, 3)
        assert sum(int.from_bytes(r[:8], "little")
                   for r in [obj.maps["hits"].lookup(bytes(4)) or b""]) == 3
    finally:
        obj.close()


def test_the_generated_xmm_read_is_linked_and_loads(privileged: None, c_layouts_o2: Path
                                                    ) -> None:
    """The generated program's XMM reads, linked to a kernel function of the helper's
    shape (bpf_probe_read_user(dst, size, ptr), which fails on the small number the
    helper takes as register): the kernel loads and runs it, every call of mix is an
    event, n is read, and x and y are reported as faulted reads, never as a number."""
    from agent.kernel import load
    plan = _plan(c_layouts_o2, True)
    program = codegen.generate(plan, "bpf_get_fp_reg")
    program = replace(program, calls={prelude.XMM_CALL: "bpf_probe_read_user"})
    seen = []
    with load.Loaded(plan, program) as loaded:
        _run(c_layouts_o2, 2)
        loaded.read(lambda run: seen.extend(program.decode(r) for r in ringbuf.records(run)))
    assert len(seen) == 2
    for e in seen:
        assert e.values["n"] == 2 and e.values["x"] is None and e.values["y"] is None
        assert set(e.faults) == {"x", "y"}


def test_a_kernel_without_the_named_function_is_one_clear_error() -> None:
    from agent.kernel import attach, objects
    with pytest.raises(attach.LoadError, match="the kernel has no bpf_no_such_thing to call"):
        objects.kernel_calls({prelude.XMM_CALL: "bpf_no_such_thing"})
