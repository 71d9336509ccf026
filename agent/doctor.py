"""`noop doctor`: check that this machine can run noop and say how to fix it."""

from __future__ import annotations

import argparse
import ctypes
import errno
import functools
import gzip
import json
import os
import platform
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from agent import kheaders

OK, MISSING, WARN = "ok", "missing", "warn"

TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
UPROBE_PMU = Path("/sys/bus/event_source/devices/uprobe/type")
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")

# Kernel functions that would let a uprobe program read the user's XMM
# (SSE) registers, where Go and the SysV ABI pass float arguments. Mainline
# Linux has none: BPF programs see only pt_regs, the general-purpose
# registers. The one known proposal is the kfunc
# bpf_get_fp_reg(dst, size, regno), out of tree (github.com/derekparker/linux,
# selftest uprobe_fp_regs); add names here as kernels gain such a helper.
XMM_HELPERS = ("bpf_get_fp_reg",)
XMM_FALLBACK = "noop falls back to floats in memory or GPRs"


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: status is ok, missing or warn; fix is one line."""

    name: str
    title: str
    status: str
    detail: str
    fix: str = ""
    required: bool = True

    @property
    def blocks(self) -> bool:
        """True when this finding stops noop from running."""
        return self.required and self.status == MISSING


def _ok(name: str, title: str, detail: str, *, required: bool = True) -> Check:
    return Check(name, title, OK, detail, "", required)


def _bad(name: str, title: str, detail: str, fix: str, *, required: bool = True) -> Check:
    return Check(name, title, MISSING if required else WARN, detail, fix, required)


# --- the bpf() system call -------------------------------------------------

_NR_BPF = {"x86_64": 321, "aarch64": 280}
BPF_MAP_CREATE, BPF_PROG_LOAD = 0, 5
BPF_MAP_TYPE_RINGBUF = 27
BPF_PROG_TYPE_KPROBE = 2  # uprobe programs are of this type


def _bpf(cmd: int, attr: bytes) -> int:
    """Call bpf(cmd, attr) and close the new fd; return 0 or the errno."""
    nr = _NR_BPF.get(platform.machine())
    if nr is None:
        return errno.ENOSYS
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


def _errno_text(err: int) -> str:
    return f"{errno.errorcode.get(err, err)} ({os.strerror(err)})"


# --- checks ----------------------------------------------------------------

PRIV_FIX = "use root or CAP_BPF+CAP_PERFMON+CAP_SYS_ADMIN"


def check_bpf_syscall() -> Check:
    name, title = "bpf", "bpf syscall"
    err = prog_load_kprobe()
    if err == 0:
        return _ok(name, title, "loads a kprobe-type program")
    if err in (errno.EPERM, errno.EACCES):
        return _bad(name, title, f"refused: {_errno_text(err)}", PRIV_FIX)
    fix = "kernel needs CONFIG_BPF_SYSCALL=y and CONFIG_BPF_EVENTS=y"
    return _bad(name, title, f"failed: {_errno_text(err)}", fix)


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


def check_uprobes() -> Check:
    return judge_uprobes(kernel_config(), UPROBE_PMU)


def judge_uprobes(config: dict[str, str] | None, pmu: Path) -> Check:
    name, title = "uprobes", "uprobes"
    option = (config or {}).get("CONFIG_UPROBE_EVENTS")
    if pmu.exists():
        extra = ", CONFIG_UPROBE_EVENTS=y" if option == "y" else ""
        return _ok(name, title, f"uprobe perf PMU{extra}")
    if option == "y":
        return _ok(name, title, "CONFIG_UPROBE_EVENTS=y")
    found = "not set" if config is not None else "kernel config unreadable"
    return _bad(
        name,
        title,
        f"no uprobe PMU; CONFIG_UPROBE_EVENTS {found}",
        "use a kernel built with CONFIG_UPROBE_EVENTS=y",
    )


CAPS = {21: "CAP_SYS_ADMIN", 38: "CAP_PERFMON", 39: "CAP_BPF"}


def missing_caps(status_text: str, last_cap: int = 40) -> tuple[str, ...]:
    """Names of the capabilities noop needs that CapEff lacks.

    Kernels older than 5.8 (last_cap < 38) have no CAP_BPF/CAP_PERFMON;
    there CAP_SYS_ADMIN alone covers both.
    """
    eff = 0
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            eff = int(line.split()[1], 16)
    return tuple(n for bit, n in sorted(CAPS.items()) if bit <= last_cap and not eff >> bit & 1)


def check_privileges(status_text: str | None = None, last_cap: int | None = None) -> Check:
    name, title = "privileges", "privileges"
    try:
        if status_text is None:
            status_text = Path("/proc/self/status").read_text()
        if last_cap is None:
            last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError) as exc:
        return _bad(name, title, f"cannot read capabilities: {exc}", PRIV_FIX)
    lacking = missing_caps(status_text, last_cap)
    if not lacking:
        who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
        held = " ".join(CAPS[bit] for bit in sorted(CAPS) if bit <= last_cap)
        return _ok(name, title, f"{who}, has {held}")
    return _bad(name, title, "lacking " + " ".join(lacking), PRIV_FIX)


def check_tracefs(dirs: Sequence[Path] = TRACEFS_DIRS) -> Check:
    name, title = "tracefs", "tracefs"
    for d in dirs:
        try:
            if (d / "uprobe_events").exists():
                return _ok(name, title, f"{d}/uprobe_events")
        except PermissionError:
            return _bad(name, title, f"{d}: permission denied", PRIV_FIX)
    # BCC attaches through the perf PMU, but removes probes via uprobe_events
    # and raises "Failed to detach BPF from uprobe" when it cannot.
    return _bad(
        name,
        title,
        "no uprobe_events in " + " or ".join(map(str, dirs)),
        "mount -t tracefs nodev /sys/kernel/tracing",
    )


_BCC_PROBE = r"""
import json
out = {}
try:
    import bcc
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
else:
    out["file"] = getattr(bcc, "__file__", None)
    out["has_attach_uprobe"] = hasattr(getattr(bcc, "BPF", None), "attach_uprobe")
try:
    import importlib.metadata as md
    dist = md.distribution("bcc")
    out["installer"] = (dist.read_text("INSTALLER") or "").strip()
    out["dist_dir"] = str(dist.locate_file(""))
except Exception:
    pass
print(json.dumps(out))
"""

BCC_FIX = "apt-get install python3-bpfcc"
PIP_FIX = "pip uninstall bcc (PyPI's bcc is unrelated); " + BCC_FIX


def probe_bcc(python: str | None = None) -> dict[str, object]:
    """Import bcc in a child interpreter so a broken one cannot crash us."""
    try:
        run = subprocess.run(
            [python or sys.executable, "-c", _BCC_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        found: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
        return found
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return {"error": f"probe failed: {exc}"}


def _venv_without_system_packages() -> bool:
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    if sys.prefix == sys.base_prefix or not cfg.is_file():
        return False
    return "include-system-site-packages = false" in cfg.read_text()


def judge_bcc(info: dict[str, object], isolated_venv: bool = False) -> Check:
    """Turn probe_bcc()'s findings into a check."""
    name, title = "bcc", "bcc module"
    # dpkg leaves no INSTALLER file; pip and friends do.
    pip_installed = info.get("installer") not in (None, "")
    if "error" in info:
        # the distro's module is invisible from a venv without system packages
        fix = "recreate the venv with --system-site-packages" if isolated_venv else BCC_FIX
        return _bad(name, title, str(info["error"]), fix)
    where = str(info.get("file") or "?")
    if not info.get("has_attach_uprobe"):
        return _bad(name, title, f"{where} is not BCC (no BPF.attach_uprobe)", PIP_FIX)
    package_dir = os.path.dirname(os.path.dirname(where))
    if pip_installed and info.get("dist_dir") != package_dir:
        return _bad(name, title, "PyPI's unrelated bcc is installed too", PIP_FIX, required=False)
    return _ok(name, title, os.path.dirname(where))


def check_bcc() -> Check:
    return judge_bcc(probe_bcc(), _venv_without_system_packages())


def check_headers(source: kheaders.HeaderSource | None = None) -> Check:
    name, title = "headers", "kernel headers"
    source = source or kheaders.find_headers()
    fix_merge = "run `noop headers` (else done on first run)"
    if source.usable:
        return _ok(name, title, f"{source.path} ({source.kind})")
    if source.kind == "env":
        return _bad(
            name, title, source.detail, f"unset {kheaders.ENV_VAR} or point it at a kernel tree"
        )
    if source.kind == "mergeable":
        return Check(name, title, WARN, source.detail, fix_merge)
    return _bad(name, title, source.detail, kheaders.INSTALL_HINT + ", then `noop headers`")


def check_ringbuf() -> Check:
    name, title = "ringbuf", "ring buffer"
    err = map_create(BPF_MAP_TYPE_RINGBUF, 0, 0, os.sysconf("SC_PAGE_SIZE"))
    if err == 0:
        return _ok(name, title, "BPF_MAP_TYPE_RINGBUF map created")
    if err in (errno.EPERM, errno.EACCES):
        return _bad(name, title, f"refused: {_errno_text(err)}", PRIV_FIX)
    return _bad(name, title, f"map create failed: {_errno_text(err)}", "use a kernel >= 5.8")


# --- BTF: which functions the running kernel has ---------------------------


@dataclass(frozen=True, slots=True)
class BtfFacts:
    """Names found in a BTF blob (vmlinux)."""

    funcs: frozenset[str]
    kfuncs: frozenset[str]  # FUNCs tagged "bpf_kfunc" (kernel >= 6.9)
    tagged: bool  # whether the blob tags kfuncs at all
    helpers: frozenset[str]  # enumerators of enum bpf_func_id


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
    helpers: set[str] = set()
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
                helpers.add(name(struct.unpack_from(order + "I", data, pos + 12 + 8 * i)[0]))
        if kind not in _KIND_EXTRA:
            raise ValueError(f"BTF kind {kind} unknown to noop")
        fixed, per_member = _KIND_EXTRA[kind]
        pos += 12 + fixed + per_member * vlen
        type_id += 1
    kfuncs = frozenset(funcs[t] for t in tags if t in funcs)
    return BtfFacts(frozenset(funcs.values()), kfuncs, bool(tags), frozenset(helpers))


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


def xmm_helper_available(path: Path = VMLINUX_BTF) -> str | None:
    """Name of a kernel helper that reads XMM registers from a uprobe, or None."""
    facts = vmlinux_btf(path)
    return find_xmm_helper(facts) if facts else None


def check_xmm_helper(facts: BtfFacts | None = None, path: Path = VMLINUX_BTF) -> Check:
    name, title = "xmm", "xmm read helper"
    facts = facts or vmlinux_btf(path)
    if facts is None:
        return _bad(name, title, f"no {path}: cannot tell", XMM_FALLBACK, required=False)
    found = find_xmm_helper(facts)
    if found:
        return _ok(name, title, f"kfunc {found}", required=False)
    return Check(name, title, MISSING, "no kfunc reads XMM (float) registers", XMM_FALLBACK, False)


def check_uprobe_multi(facts: BtfFacts | None = None, path: Path = VMLINUX_BTF) -> Check:
    name, title = "uprobe-multi", "uprobe multi"
    facts = facts or vmlinux_btf(path)
    if facts is not None and "bpf_uprobe_multi_link_attach" in facts.funcs:
        return _ok(name, title, "uprobe_multi links (kernel >= 6.6)", required=False)
    detail = "no uprobe_multi links (kernel < 6.6)" if facts else f"no {path}: cannot tell"
    return _bad(name, title, detail, "optional: one uprobe per site is used", required=False)


CHECKS: tuple[Callable[[], Check], ...] = (
    check_bpf_syscall,
    check_uprobes,
    check_privileges,
    check_tracefs,
    check_bcc,
    check_headers,
    check_ringbuf,
    check_xmm_helper,
    check_uprobe_multi,
)


def run_checks(checks: Sequence[Callable[[], Check]] = CHECKS) -> tuple[Check, ...]:
    """Run every check; a check that raises becomes a missing finding."""
    results = []
    for check in checks:
        try:
            results.append(check())
        except Exception as exc:  # a probe's own failure must not stop doctor
            label = getattr(check, "__name__", "check").removeprefix("check_")
            results.append(
                Check(label, label, MISSING, f"check failed: {exc!r}", "report this as a noop bug")
            )
    return tuple(results)


def can_run(checks: Sequence[Check]) -> bool:
    return not any(c.blocks for c in checks)


def render(checks: Sequence[Check]) -> str:
    """One line per check, plus an indented fix line when it is not ok."""
    lines = []
    for c in checks:
        lines.append(f"{c.status:<9}{c.title:<17}{c.detail}")
        if c.status != OK and c.fix:
            # An optional check's line is what noop does without it, not a fix to apply.
            label = "fix" if c.required else "note"
            lines.append(f"{'':<26}{label}: {c.fix}")
    verdict = "noop can run" if can_run(checks) else "noop cannot run: fix what is missing above"
    lines.append(verdict)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="noop doctor", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    checks = run_checks()
    if args.json:
        doc = {"ok": can_run(checks), "checks": [asdict(c) for c in checks]}
        print(json.dumps(doc, indent=2))
    else:
        print(render(checks))
    return 0 if can_run(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
