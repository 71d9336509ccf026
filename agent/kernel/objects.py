"""A compiled program in the kernel (``Object``): its maps created and its functions
loaded through noop's own ``bpfsys`` calls, the stand-in calls of kernel functions
linked first (``link_calls``); ``build`` compiles it (``compile``: BCC in a child
process, or the cache) and loads it. And ``Bare``, a hand-written program on one
instruction, which ``noop bench`` measures noop's generated programs against."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping

from agent.binary.proof import Opened, Proof
from agent.kernel import bpfsys, uprobes
from agent.kernel.attach import Handle, LoadError, Uprobe, attach_kind, attach_proven
from agent.kernel.compile import Compiled, compile_c
from agent.kernel.preflight import check_privileges


class Object:
    """A compiled program in the kernel: its maps created, its functions loaded (the
    stand-in calls of ``calls`` linked first). ``close`` frees all of it."""

    def __init__(self, compiled: Compiled, functions: list[str],
                 calls: Mapping[int, tuple[int, int]] | None = None) -> None:
        self.maps: dict[str, bpfsys.Map] = {}
        self.progs: dict[str, int] = {}
        try:
            for d in compiled.maps:
                self.maps[d.name] = bpfsys.Map(d)
            for name in functions:
                fn = compiled.functions.get(name)
                if fn is None:
                    raise LoadError(f"BCC compiled no function {name}",
                                    "run 'noop check --emit-c'")
                code = bytearray(fn.insns)
                for at, m in fn.maps:  # the map's fd into its lddw, as BCC's loader does
                    struct.pack_into("<i", code, at * 8 + 4, self.maps[m].fd)
                link_calls(code, calls or {})
                self.progs[name] = bpfsys.load_program(
                    name, bytes(code), compiled.license, compiled.kern_version,
                    bpfsys.ATTACH_UPROBE_MULTI if attach_kind().multi else 0)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in self.progs.values():
            bpfsys.close_fd(fd)
        self.progs.clear()
        for m in self.maps.values():
            m.close()
        self.maps.clear()

    def __enter__(self) -> Object:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build(text: str, functions: list[str], calls: Mapping[int, str] | None = None,
          progress: Callable[[str], None] | None = None) -> Object:
    """Compile (or find in the cache) ``text`` and load ``functions`` of it."""
    n = len(functions)
    compiled = compile_c(text, f"compiling {n} BPF program{'s' * (n != 1)}", progress)
    if progress is not None:
        progress(f"loading {n} BPF program{'s' * (n != 1)}"
                 + (" (compiled before)" if compiled.cached else ""))
    return Object(compiled, functions, kernel_calls(calls or {}))


class Bare:
    """A hand-written BPF program attached at one instruction (``offset`` in the file)
    of every process running ``binary``: what ``noop bench`` measures noop's generated
    programs against. ``text`` None: the empty program (``return 0``), loaded as its
    two instructions with no compiler. Use as a context manager; leaving it
    detaches."""

    def __init__(self, text: str | None, binary: str, offset: int, function: str,
                 proof: Proof | None) -> None:
        check_privileges()
        self.obj: Object | None = None
        self.fd = -1
        self.probe: Handle | None = None
        try:
            if text is None:
                self.fd = bpfsys.load_program(
                    function[:15], uprobes.EMPTY, "GPL", 0,
                    bpfsys.ATTACH_UPROBE_MULTI if attach_kind().multi else 0)
                prog = self.fd
            else:
                self.obj = build(text, [function])
                prog = self.obj.progs[function]
            with Opened(binary) as opened:
                (self.probe,) = attach_proven(binary, opened, [Uprobe(
                    offset, proof, prog, f"at file offset {offset:#x} of {binary}")])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
            self.probe = None
        if self.obj is not None:
            self.obj.close()
            self.obj = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Bare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kernel_calls(calls: Mapping[int, str]) -> dict[int, tuple[int, int]]:
    """For each stand-in call number of a program, how the kernel names the function
    it stands for (``kfeatures.call_of``)."""
    if not calls:
        return {}
    from agent.kernel import kfeatures

    facts = kfeatures.vmlinux_btf()
    out = {}
    for number, name in calls.items():
        found = kfeatures.call_of(name, facts) if facts is not None else None
        if found is None:
            raise LoadError(f"the kernel has no {name} to call", "run 'noop doctor'")
        out[number] = found
    return out


_CALL = 0x85  # BPF_JMP | BPF_CALL


def link_calls(code: bytearray, calls: Mapping[int, tuple[int, int]]) -> int:
    """Rewrite, in compiled code before it is loaded, each helper call of a stand-in
    number in ``calls`` into a call of the kernel function it stands for (src_reg,
    imm): BCC's compiler refuses kfunc declarations. The number of calls rewritten."""
    n = 0
    for at in range(0, len(code) - 7, 8):  # a lddw's second half has opcode 0: never a call
        imm = int.from_bytes(bytes(code[at + 4:at + 8]), "little", signed=True)
        if code[at] != _CALL or code[at + 1] >> 4 or imm not in calls:
            continue
        src, target = calls[imm]
        code[at + 1] = (code[at + 1] & 0x0F) | (src << 4)
        code[at + 2] = code[at + 3] = 0  # off 0: a kfunc of vmlinux, not of a module
        code[at + 4:at + 8] = target.to_bytes(4, "little", signed=True)
        n += 1
    return n
