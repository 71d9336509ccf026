"""The C that reads one value at a probe site: from a register, through pointer hops and
slice headers, from the kernel's XMM reader, or from what a call's entry kept; and why
a value can never be read at its site with this kernel."""

from __future__ import annotations

from agent.binary.amd64 import is_vector
from agent.binary.arch import AMD64, Arch
from agent.plan.fetches import Fetch, Op, fetch_kind


def unreadable(fetch: Fetch, xmm_helper: str | None) -> str:
    """Why ``fetch`` can never be read at its site with this kernel ('' when it can)."""
    if fetch.kind == "unavailable":
        return fetch.why
    regs = [r for r in fetch.regs if is_vector(r)]
    if regs and not regs[0].startswith("xmm"):
        return (f"in {regs[0]}: a uprobe's registers (pt_regs) do not hold the "
                "floating-point and vector ones")
    if regs and xmm_helper is None:
        return (f"in {regs[0]}: this kernel has no BPF helper to read XMM registers "
                "in a uprobe (see noop doctor)")
    if regs and xmm_register(fetch) is None:
        return (f"in {', '.join(regs)}: noop reads an XMM register through {xmm_helper} "
                "only for a value held whole in one")
    return ""


def xmm_register(fetch: Fetch) -> int | None:
    """The XMM register number of a value held whole in one, else None."""
    if fetch.kind == "reg" and len(fetch.regs) == 1 and is_vector(fetch.regs[0]):
        return int(fetch.regs[0].removeprefix("xmm"))
    return None


def object_address(fetch: Fetch) -> Fetch:
    """A ``generation`` fetch's object address, as the fetch that computes it."""
    return Fetch(fetch_kind(fetch.formula), fetch.ops, fetch.offset, 8, fetch.regs)


def fetch_c(fetch: Fetch, dst: str, bit: int, builtins: dict[str, str],
            arch: Arch = AMD64) -> list[str]:
    """C that reads ``fetch`` into ``dst``, setting ``bit`` in ``faults`` when a read
    faults and in ``absent`` when the value is not there (an index past a length);
    registers as ``arch``'s pt_regs holds them."""
    fault, gone = f"{{ faults |= {bit:#x}; break; }}", f"{{ absent |= {bit:#x}; break; }}"
    kept = _kept_c(fetch, dst, bit, builtins, arch)
    if kept is not None:
        return kept
    if fetch.kind == "gotype":  # a Go interface's dynamic type: its descriptor's address
        word = [f"\tu64 t = {arch.c_reg(fetch.regs[0])};"] if fetch.regs else [
            "\tu64 t = 0;", f"\tif (noop_read(&t, 8, a + ({fetch.offset}))) {fault}"]
        return ["do {", "\tu64 a = 0;", *("\t" + line for op in fetch.ops
                                          for line in _op(op, fault, gone, arch)),
                *word, *([f"\tif (t && noop_read(&t, 8, t + 8)) {fault}"] if fetch.slot
                         else []), f"\t{dst} = t;", "} while (0);"]
    xmm = xmm_register(fetch)
    if xmm is not None:  # only with the kernel's XMM reader (see unreadable)
        return ["do {", "\tu64 x = 0;", f"\tif (noop_xmm_read(&x, 8, {xmm})) {fault}",
                f'\t_Static_assert(sizeof({dst}) <= 8, "one XMM register\'s low half");',
                f"\t__builtin_memcpy(&{dst}, &x, sizeof({dst}));", "} while (0);"]
    if fetch.kind in ("reg", "reg_slice"):
        return _register_c(fetch, dst, bit, fault, gone, arch)
    if fetch.kind == "caller" and fetch.regs:  # still in the link register: the binary's own
        return [f"{dst} = {arch.c_reg(fetch.regs[0])} - ({arch.c_pc} - {fetch.base:#x}ULL);"]
    return _memory_c(fetch, dst, fault, gone, arch)


def _kept_c(fetch: Fetch, dst: str, bit: int, builtins: dict[str, str], arch: Arch
            ) -> list[str] | None:
    """C for a value that is no read of the program's registers or memory as they are
    (a built-in, a constant, an object's generation, what a call's entry kept); None
    for any other."""
    if fetch.kind == "builtin":
        return [f"{dst} = {builtins[fetch.builtin]};"]
    if fetch.kind == "const":  # the bits as they are, whatever the value's type
        return ["do {", f"\tu64 k = {fetch.offset & 2**64 - 1:#x}ULL;",
                f'\t_Static_assert(sizeof({dst}) == 8, "an 8-byte constant");',
                f"\t__builtin_memcpy(&{dst}, &k, 8);", "} while (0);"]
    if fetch.kind == "generation":  # of the object at the address: 0 when none seen
        return ["do {", "\tu64 o = 0;",
                # (a faulted read leaves o 0: no generation; no branch on the faults,
                # which would make the verifier keep a state per combination of them)
                *("\t" + line for line in fetch_c(object_address(fetch), "o", bit, builtins,
                                                      arch)),
                "\tstruct noop_genkey gk = {.pid = bpf_get_current_pid_tgid() >> 32, "
                ".object = o};", "\tu64 *g = noop_generations.lookup(&gk);",
                f"\t{dst} = g ? *g : 0;", "} while (0);"]
    if fetch.kind == "saved":  # in a return's program: from its call's record
        src = f"c->e.v{fetch.slot}"
        return [f'_Static_assert(sizeof({dst}) == sizeof({src}), "saved value");',
                f"__builtin_memcpy(&{dst}, &{src}, sizeof({dst}));"]
    return None


def _register_c(fetch: Fetch, dst: str, bit: int, fault: str, gone: str, arch: Arch
                ) -> list[str]:
    """A value in a register (``reg``), or the bytes at the pointer in one register, as
    many as another holds (``reg_slice``); after the checks of its ops."""
    if fetch.kind == "reg" and fetch.formula in ("-", "+"):  # the difference or sum of two
        read = [f"{dst} = {arch.c_reg(fetch.regs[0])} {fetch.formula} "
                f"{arch.c_reg(fetch.regs[1])};"]
    elif fetch.kind == "reg":
        reg = arch.c_reg(fetch.regs[0])
        read = [f"{dst} = {reg}{f' + ({fetch.offset})' if fetch.offset else ''};"]
    else:
        ptr, n = (arch.c_reg(r) for r in fetch.regs)
        read = [f"if (noop_copy(&{dst}, {ptr}, {n}))", f"\tfaults |= {bit:#x};"]
    if not fetch.ops:
        return read
    # Checks of registers first (an enum's variant held in one): then the read.
    guards = ["\t" + line for op in fetch.ops for line in _op(op, fault, gone, arch)]
    return ["do {", *guards, *("\t" + line for line in read), "} while (0);"]


def _memory_c(fetch: Fetch, dst: str, fault: str, gone: str, arch: Arch) -> list[str]:
    """A value through the address its ops compute: the address itself, or what is read
    there (a word, a sum with the update to come, a caller, a slice, an array)."""
    out = ["do {", "\tu64 a = 0;"]
    out += ["\t" + line for op in fetch.ops for line in _op(op, fault, gone, arch)]
    at = f"a + ({fetch.offset})" if fetch.offset else "a"
    if fetch.kind in ("root", "addr"):
        out.append(f"\t{dst} = {at if fetch.kind == 'addr' else 'a'};")
    elif fetch.kind == "sum":  # the field, and what the update to come adds to it
        plus = (f"{'-' if fetch.formula == '-' else '+'} {arch.c_reg(fetch.regs[0])}"
                if fetch.regs else f"+ {fetch.base & 2**64 - 1:#x}ULL")
        out += ["\tu64 old = 0;", f"\tif (noop_read(&old, 8, {at})) {fault}",
                f"\t{dst} = old {plus};"]
    elif fetch.kind == "mem":
        out.append(f"\tif (noop_read(&{dst}, {fetch.size}, {at})) {fault}")
    elif fetch.kind == "caller":  # the binary's own address: less the load bias
        out += ["\tu64 r = 0;", f"\tif (noop_read(&r, 8, {at})) {fault}",
                f"\t{dst} = r - ({arch.c_pc} - {fetch.base:#x}ULL);"]
    elif fetch.kind == "mem_slice" and fetch.regs:  # one word in a register
        mine, other = ("h[0]", "h[1]") if fetch.slot == 0 else ("h[1]", "h[0]")
        out += ["\tu64 h[2];", f"\t{mine} = {arch.c_reg(fetch.regs[0])};",
                f"\tif (noop_read(&{other}, 8, {at})) {fault}",
                f"\tif (noop_copy(&{dst}, h[0], h[1])) {fault}"]
    elif fetch.kind == "mem_slice":
        out += ["\tu64 h[2];", *_header("h", at, fetch.length, fault),
                f"\tif (noop_copy(&{dst}, h[0], h[1])) {fault}"]
    elif fetch.kind == "mem_array":
        out.append(f"\tif (noop_copy(&{dst}, {at}, sizeof({dst}.s))) {fault}")
    else:
        raise ValueError(f"unknown fetch kind {fetch.kind}")
    return [*out, "} while (0);"]


def _op(op: Op, fault: str, gone: str, arch: Arch) -> list[str]:
    if op.op == "reg":
        return [f"a = {arch.c_reg(op.reg)};"]
    if op.op == "sp":
        return [f"a = {arch.c_sp} + ({op.offset});"]
    if op.op == "root":  # in a return's program: a pointer its call's entry kept
        return [f"a = c->root[{op.index}];"]
    if op.op == "add":
        return [f"a += {op.offset};"]
    if op.op == "deref":
        return [f"if (noop_read(&a, 8, a + ({op.offset}))) {fault}"]
    if op.op == "bound":
        return [f"if ({arch.c_reg(op.reg)} <= {op.index}) {gone}"]
    if op.op == "index":
        return ["{", "\tu64 s[2];  /* slice header: ptr, len */",
                *_header("s", f"a + ({op.offset})", op.length, fault),
                f"\tif (s[1] <= {op.index}) {gone}",
                f"\ta = s[0] + {op.index * op.size};", "}"]
    if op.op == "itype":  # a Go type assertion: absent unless the dynamic type is one
        read = [f"\tu64 t = {arch.c_reg(op.reg)};"] if op.reg else [
            "\tu64 t = 0;", f"\tif (noop_read(&t, 8, a + ({op.offset}))) {fault}"]
        test = " || ".join(f"t == {v:#x}ULL" for v in op.values) or "0"
        return ["{", *read, f"\tif (!t) {gone}",
                *([f"\tif (noop_read(&t, 8, t + 8)) {fault}"] if op.index else []),
                f"\tif (!({test})) {gone}", "}"]
    if op.op == "when":  # an enum's variant: absent unless the discriminant matches
        mask = (1 << 8 * op.size) - 1 if op.size < 8 else 0
        read = ([f"\tu64 d = {arch.c_reg(op.reg)}{f' & {mask:#x}ULL' if mask else ''};"]
                if op.reg else
                ["\tu64 d = 0;", f"\tif (noop_read(&d, {op.size}, a + ({op.offset}))) {fault}"])
        test = " || ".join(f"d == {v & ((1 << 8 * op.size) - 1):#x}ULL" for v in op.values)
        if not test:
            return [] if op.negate else [gone]
        cond = f"({test})" if op.negate else f"(!({test}))"
        return ["{", *read, f"\tif {cond} {gone}", "}"]
    raise ValueError(f"unknown op {op.op}")


def _header(var: str, at: str, length: int | None, fault: str) -> list[str]:
    """Read a {ptr, len} header into ``var``: 16 bytes at ``at``, or (``length`` set) the
    pointer there and the length at a + ``length``."""
    if length is None:
        return [f"\tif (noop_read({var}, 16, {at})) {fault}"]
    return [f"\tif (noop_read(&{var}[0], 8, {at})) {fault}",
            f"\tif (noop_read(&{var}[1], 8, a + ({length}))) {fault}"]
