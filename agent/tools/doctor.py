"""`noop doctor`: check that this machine can run noop and say how to fix it."""

from __future__ import annotations

import argparse
import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from agent.kernel import kheaders
from agent.kernel.kfeatures import (
    BPF_MAP_TYPE_RINGBUF,
    VMLINUX_BTF,
    BtfFacts,
    find_xmm_helper,
    kernel_config,
    map_create,
    prog_load_kprobe,
    vmlinux_btf,
)
from agent.kernel.privileges import (
    PRIV_FIX,
    advised_caps,
    missing_caps,
)
from agent.kernel.privileges import (
    held as privileges_held,
)

OK, MISSING, WARN = "ok", "missing", "warn"

TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
UPROBE_PMU = Path("/sys/bus/event_source/devices/uprobe/type")
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


def _errno_text(err: int) -> str:
    return f"{errno.errorcode.get(err, err)} ({os.strerror(err)})"


# --- checks ----------------------------------------------------------------

def check_bpf_syscall() -> Check:
    name, title = "bpf", "bpf syscall"
    err = prog_load_kprobe()
    if err == 0:
        return _ok(name, title, "loads a kprobe-type program")
    if err in (errno.EPERM, errno.EACCES):
        return _bad(name, title, f"refused: {_errno_text(err)}", PRIV_FIX)
    fix = "kernel needs CONFIG_BPF_SYSCALL=y and CONFIG_BPF_EVENTS=y"
    return _bad(name, title, f"failed: {_errno_text(err)}", fix)


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


def check_privileges(status_text: str | None = None, last_cap: int | None = None,
                     multi: bool | None = None) -> Check:
    """The capabilities held against those attaching needs: through uprobe_multi links
    (``multi``; by default, whether this kernel makes them for this process) or not."""
    name, title = "privileges", "privileges"
    try:
        if status_text is None:
            status_text = Path("/proc/self/status").read_text()
        if last_cap is None:
            last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError) as exc:
        return _bad(name, title, f"cannot read capabilities: {exc}", PRIV_FIX)
    if multi is None:
        from agent.errors import NoopError
        from agent.kernel.attach import attach_kind

        try:
            kind = attach_kind()
            multi = kind.multi or kind.denied
        except NoopError:
            multi = False
    lacking = missing_caps(status_text, last_cap, multi)
    if not lacking:
        who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
        held = " ".join(privileges_held(status_text, last_cap))
        advised = advised_caps(status_text)
        if advised:
            return Check(name, title, WARN, f"{who}, has {held}; lacking "
                         + " ".join(n for n, _ in advised),
                         "; ".join(f"without {n}, {why}" for n, why in advised), False)
        return _ok(name, title, f"{who}, has {held}")
    return _bad(name, title, "lacking " + " ".join(lacking), PRIV_FIX)


def check_tracefs(dirs: Sequence[Path] = TRACEFS_DIRS, multi: bool | None = None) -> Check:
    """tracefs, where perf-event uprobes need it; ``multi``: whether uprobes go on
    through uprobe_multi links, which need none (None: as this process would attach)."""
    name, title = "tracefs", "tracefs"
    for d in dirs:
        try:
            if (d / "uprobe_events").exists():
                return _ok(name, title, f"{d}/uprobe_events")
        except PermissionError:
            return _bad(name, title, f"{d}: permission denied", PRIV_FIX)
    if multi is None:
        from agent.errors import NoopError
        from agent.kernel.attach import attach_kind

        try:
            multi = attach_kind().multi
        except NoopError:
            multi = False
    if multi:
        return _ok(name, title, "not mounted, and not needed: uprobes go on through "
                   "uprobe_multi links", required=False)
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


def check_native(built: bool | None = None) -> Check:
    """Whether noop was installed with its walk of DWARF units in C (a compiler built
    it): without it the same walk runs in Python, several times slower on a large
    binary's debug info."""
    from agent.binary.dwarf import native

    name, title = "native", "DWARF walk in C"
    if native.BUILT if built is None else built:
        return _ok(name, title, "built")
    return _bad(name, title, "not built: debug info is walked in Python, several times "
                "slower on a large binary",
                "install gcc and python3-dev, then install noop again", required=False)


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


def check_xmm_helper(facts: BtfFacts | None = None, path: Path = VMLINUX_BTF) -> Check:
    name, title = "xmm", "xmm read helper"
    facts = facts or vmlinux_btf(path)
    if facts is None:
        return _bad(name, title, f"no {path}: cannot tell", XMM_FALLBACK, required=False)
    found = find_xmm_helper(facts)
    if found:
        return _ok(name, title, f"{found}: float arguments are read where they are passed",
                   required=False)
    return Check(name, title, MISSING, "no kfunc reads XMM (float) registers", XMM_FALLBACK, False)


def check_uprobe_multi(facts: BtfFacts | None = None, path: Path = VMLINUX_BTF) -> Check:
    """How noop's uprobes go on here, and why: uprobe_multi links where the kernel makes
    them for this process (tried), else a perf-event uprobe per site (CAP_SYS_ADMIN)."""
    from agent.errors import NoopError
    from agent.kernel.attach import attach_kind

    name, title = "uprobe-multi", "attach"
    try:
        kind = attach_kind()
    except NoopError as exc:
        return _bad(name, title, exc.message, exc.hint or "", required=False)
    if kind.multi:
        return _ok(name, title, f"{kind.name}: {kind.why}", required=False)
    facts = facts or vmlinux_btf(path)
    has = facts is not None and "bpf_uprobe_multi_link_attach" in facts.funcs
    fix = ("give noop CAP_BPF and CAP_PERFMON (or run it as root)" if kind.denied and has
           else "optional on this kernel: perf-event uprobes need CAP_SYS_ADMIN and take "
           "about 0.1 s each to come off; Linux >= 6.6 has links")
    return _bad(name, title, f"{kind.name}: {kind.why}", fix, required=False)


def check_costs() -> Check:
    """What a uprobe hit costs here (calibrated once, then cached): what budgets use."""
    from agent.errors import NoopError
    from agent.kernel import cost

    name, title = "costs", "uprobe hit cost"
    try:
        got = cost.costs()
    except NoopError as exc:
        return _bad(name, title, exc.message, exc.hint or PRIV_FIX, required=False)
    stats = cost.RunTimes()
    timed = stats.available
    why = stats.why
    stats.close()
    if not timed:
        return Check(name, title, WARN, got.describe() + "; BPF run time not kept: " + why,
                     "budgets count the traps only; run noop with CAP_SYS_ADMIN or set "
                     "sysctl kernel.bpf_stats_enabled=1 to count the programs' run time too",
                     False)
    return _ok(name, title, got.describe(), required=False)


CHECKS: tuple[Callable[[], Check], ...] = (
    check_bpf_syscall,
    check_uprobes,
    check_privileges,
    check_tracefs,
    check_bcc,
    check_native,
    check_headers,
    check_ringbuf,
    check_xmm_helper,
    check_uprobe_multi,
    check_costs,
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
