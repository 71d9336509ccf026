"""Kernel facts read without BCC: the bpf() system call, kernel config, and vmlinux BTF.

Shared by ``noop doctor`` and the loader; nothing here imports ``bcc``.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import gzip
import os
import platform
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
T = TypeVar("T")

# Kernel functions that would let a uprobe program read the user's XMM
# (SSE) registers, where Go and the SysV ABI pass float arguments. Mainline
# Linux has none: BPF programs see only pt_regs, the general-purpose
# registers. The one known proposal is the kfunc
# bpf_get_fp_reg(dst, size, regno), out of tree (github.com/derekparker/linux,
# selftest uprobe_fp_regs); add names here as kernels gain such a helper.
XMM_HELPERS = ("bpf_get_fp_reg",)

# --- the bpf() system call -------------------------------------------------

BPF_MAP_CREATE, BPF_PROG_LOAD = 0, 5
BPF_MAP_TYPE_RINGBUF = 27
BPF_PROG_TYPE_KPROBE = 2  # uprobe programs are of this type


def _bpf(cmd: int, attr: bytes) -> int:
    """Call bpf(cmd, attr) and close the new fd; return 0 or the errno."""
    from agent.binary.arch import host

    machine = host()
    if machine is None:
        return errno.ENOSYS
    nr = machine.nr_bpf
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(ctypes.c_long(nr), ctypes.c_long(cmd), buf, ctypes.c_uint(len(attr)))
    if fd < 0:
        return ctypes.get_errno()
    os.close(fd)
    return 0


def map_create(map_type: int, key_size: int, value_size: int, max_entries: int) -> int:
    """Create and close a BPF map; return 0 or the errno."""
    attr = struct.pack("<5I", map_type, key_size, value_size, max_entries, 0)
    return _bpf(BPF_MAP_CREATE, attr.ljust(72, b"\0"))


def _kernel_version_code(release: str) -> int:
    parts = [int(p) for p in release.split("-")[0].split(".")[:3] if p.isdigit()]
    a, b, c = [*parts, 0, 0, 0][:3]
    return (a << 16) + (b << 8) + min(c, 255)


def prog_load_kprobe() -> int:
    """Load and close `r0 = 0; exit` as a kprobe-type program; 0 or errno."""
    insns = struct.pack("<BBhi", 0xB7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0)
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack(
        "<IIQQIIQI",
        BPF_PROG_TYPE_KPROBE,
        2,
        ctypes.addressof(code),
        ctypes.addressof(lic),
        0,
        0,
        0,
        _kernel_version_code(platform.release()),
    )
    return _bpf(BPF_PROG_LOAD, attr.ljust(128, b"\0"))


def kernel_config(release: str | None = None) -> dict[str, str] | None:
    """CONFIG_* options of the running kernel, or None when not readable."""
    release = release or platform.release()
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    except OSError:
        try:
            text = Path(f"/boot/config-{release}").read_text()
        except OSError:
            return None
    pairs = (line.split("=", 1) for line in text.splitlines() if line.startswith("CONFIG_"))
    return {k: v for k, v in pairs}



@dataclass(frozen=True, slots=True)
class BtfFacts:
    """Names found in a BTF blob (vmlinux)."""

    funcs: frozenset[str]
    kfuncs: frozenset[str]  # FUNCs tagged "bpf_kfunc" (kernel >= 6.9)
    tagged: bool  # whether the blob tags kfuncs at all
    helpers: frozenset[str]  # enumerators of enum bpf_func_id
    # What a call instruction names: a FUNC's BTF type id (a kfunc call's imm), and
    # each helper's number in enum bpf_func_id (a helper call's imm).
    func_ids: Mapping[str, int] = field(default_factory=dict, compare=False)
    helper_ids: Mapping[str, int] = field(default_factory=dict, compare=False)


# Bytes after the 12-byte btf_type header, by kind: fixed + per member
# (vlen). Kinds 1..19 as in the kernel's Documentation/bpf/btf.rst.
_KIND_EXTRA: dict[int, tuple[int, int]] = {
    1: (4, 0), 2: (0, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8),
    7: (0, 0), 8: (0, 0), 9: (0, 0), 10: (0, 0), 11: (0, 0), 12: (0, 0),
    13: (0, 8), 14: (4, 0), 15: (0, 12), 16: (0, 0), 17: (4, 0), 18: (0, 0),
    19: (0, 12),
}  # fmt: skip
_FUNC, _ENUM, _DECL_TAG = 12, 6, 17


def parse_btf(data: bytes) -> BtfFacts:
    """Read FUNC names, kfunc tags and BPF helper ids from raw BTF."""
    order = "<" if data[:2] == b"\x9f\xeb" else ">"
    magic, _ver, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(
        order + "HBBIIIII", data
    )
    if magic != 0xEB9F:
        raise ValueError("not BTF")
    strings = data[hdr_len + str_off : hdr_len + str_off + str_len]

    def name(off: int) -> str:
        return strings[off : strings.index(b"\0", off)].decode(errors="replace")

    funcs: dict[int, str] = {}
    tags: list[int] = []
    helpers: dict[str, int] = {}
    pos, end, type_id = hdr_len + type_off, hdr_len + type_off + type_len, 1
    while pos < end:
        name_off, info, ref = struct.unpack_from(order + "III", data, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        if kind == _FUNC:
            funcs[type_id] = name(name_off)
        elif kind == _DECL_TAG and name(name_off) == "bpf_kfunc":
            tags.append(ref)
        elif kind == _ENUM and name(name_off) == "bpf_func_id":
            for i in range(vlen):
                off, value = struct.unpack_from(order + "Ii", data, pos + 12 + 8 * i)
                helpers[name(off)] = value
        if kind not in _KIND_EXTRA:
            raise ValueError(f"BTF kind {kind} unknown to noop")
        fixed, per_member = _KIND_EXTRA[kind]
        pos += 12 + fixed + per_member * vlen
        type_id += 1
    kfuncs = frozenset(funcs[t] for t in tags if t in funcs)
    ids = {n: i for i, n in funcs.items()}
    ids.update((funcs[t], t) for t in tags if t in funcs)  # a kfunc: its tagged FUNC
    return BtfFacts(frozenset(funcs.values()), kfuncs, bool(tags), frozenset(helpers), ids,
                    helpers)


@functools.lru_cache(maxsize=4)
def vmlinux_btf(path: Path = VMLINUX_BTF) -> BtfFacts | None:
    """The running kernel's BTF facts, or None without CONFIG_DEBUG_INFO_BTF."""
    try:
        return parse_btf(path.read_bytes())
    except (OSError, ValueError, struct.error):
        return None


def find_xmm_helper(facts: BtfFacts) -> str | None:
    """The first known XMM-reading helper or kfunc that the kernel offers."""
    for helper in XMM_HELPERS:
        if "BPF_FUNC_" + helper.removeprefix("bpf_") in facts.helpers:
            return helper
        if helper in (facts.kfuncs if facts.tagged else facts.funcs):
            return helper
    return None


BPF_PSEUDO_KFUNC_CALL = 2  # a call instruction's src_reg when its imm is a BTF id


def call_of(name: str, facts: BtfFacts) -> tuple[int, int] | None:
    """How a BPF call instruction names the kernel function ``name``: (src_reg, imm),
    (0, its number) for a helper or (BPF_PSEUDO_KFUNC_CALL, its BTF id) for a kfunc of
    vmlinux; None when the kernel has neither."""
    number = facts.helper_ids.get("BPF_FUNC_" + name.removeprefix("bpf_"))
    if number is not None:
        return 0, number
    if name in (facts.kfuncs if facts.tagged else facts.funcs) and name in facts.func_ids:
        return BPF_PSEUDO_KFUNC_CALL, facts.func_ids[name]
    return None


def xmm_helper_available(path: Path = VMLINUX_BTF) -> str | None:
    """Name of a kernel helper that reads XMM registers from a uprobe, or None."""
    found = _kernel_fact(path, "xmm", ",".join(XMM_HELPERS),
                         lambda facts: find_xmm_helper(facts) if facts else None, _xmm_answer)
    return str(found) if found else None


def attach_cookies(path: Path = VMLINUX_BTF) -> bool:
    """Whether a uprobe's program can read a value set when it was attached
    (``bpf_get_attach_cookie``, Linux 5.15): then one program serves every site of
    one shape, each site telling it which it is."""
    return bool(_kernel_fact(path, "cookie", "get_attach_cookie",
                             lambda facts: facts is not None and
                             "BPF_FUNC_get_attach_cookie" in facts.helper_ids,
                             _cookie_answer))


def _xmm_answer(entry: Any) -> tuple[str | None]:
    """A cached ``{"answer": helper}``: one of XMM_HELPERS or None, in a 1-tuple (so that
    None is not a miss); anything else raises."""
    answer = entry["answer"]
    if answer is not None and (type(answer) is not str or answer not in XMM_HELPERS):
        raise ValueError(f"no XMM helper {answer!r}")
    return (answer,)


def _cookie_answer(entry: Any) -> tuple[bool]:
    """A cached ``{"answer": flag}``, in a 1-tuple; anything else raises."""
    answer = entry["answer"]
    if type(answer) is not bool:
        raise ValueError(f"not a flag: {answer!r}")
    return (answer,)


def _kernel_fact(path: Path, kind: str, key: str, compute: Callable[[BtfFacts | None], T],
                 load: Callable[[Any], tuple[T]]) -> T:
    """``compute(BTF facts)``, kept in noop's cache per kernel (release and BTF size):
    parsing the kernel's BTF takes a tenth of a second of every start. A cached answer
    is used only when ``load`` finds it one ``compute`` can give; else it is computed."""
    from agent import cache

    try:
        size = path.stat().st_size
    except OSError:
        size = -1
    kernel = f"kernel-{platform.release()}-{size}"
    hit = cache.get(kernel, kind, key, load=load) if path == VMLINUX_BTF else None
    if hit is not None:
        return hit[0]
    found = compute(vmlinux_btf(path))
    if path == VMLINUX_BTF:
        cache.put(kernel, kind, key, {"answer": found})
    return found
