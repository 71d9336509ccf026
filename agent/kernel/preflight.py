"""Before anything is compiled or loaded: whether this process may load BPF programs
(failing in one line when not; warning once of each capability without which some
targets are out of reach), and whether each target named by PID runs its program;
whether a process runs at all."""

from __future__ import annotations

import os
from pathlib import Path

from agent.kernel.attach import LoadError, attach_kind, has_links
from agent.plan.model import Plan


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])


def check_targets(plan: Plan) -> None:
    """A target named by PID must be running it: say so before spending seconds
    compiling."""
    for t in plan.targets:
        if t.pid is None:
            continue
        why = "" if alive(t.pid) else f"no process {t.pid}"
        if not why and not maps_file(t.pid, t.binary):
            why = f"process {t.pid} does not run {t.binary} ({_exe(t.pid)})"
        if why:
            error = LoadError(f"target {t.name}: {why}",
                              "check the PID, or leave it out to follow every process")
            error.exit_code = 2
            raise error


def check_arch(plan: Plan) -> None:
    """Every target's architecture must be this kernel's: a uprobe writes a breakpoint
    of the kernel's instruction set into the file (another's would corrupt its code),
    and the program reads the kernel's pt_regs."""
    from agent.binary.arch import host

    here = host()
    for t in plan.targets:
        if here is None or t.arch != here.name:
            error = LoadError(f"target {t.name}: {t.binary} is an {t.arch} binary and this "
                              f"kernel is {here.name if here else 'of another architecture'}"
                              ": a uprobe goes only into a binary of the kernel's own",
                              f"run noop on an {t.arch} machine; noop check plans for one "
                              "anywhere")
            error.exit_code = 2
            raise error


def maps_file(pid: int, path: str) -> bool:
    """Whether process ``pid`` has file ``path`` mapped (its program, or a library):
    the same device and inode, whatever path it was opened by."""
    try:
        st = os.stat(path)
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) >= 5 and fields[4] == str(st.st_ino) and fields[3] == dev:
            return True
    return False


def _exe(pid: int) -> str:
    try:
        return f"it runs {os.readlink(f'/proc/{pid}/exe')}"
    except OSError:
        return "its program cannot be read: a kernel thread, or another user's"


def check_privileges() -> None:
    """Fail early, in one line, when this process cannot load BPF programs; warn, once
    each, of capabilities without which some targets are out of reach."""
    from agent import logs
    from agent.kernel.privileges import PRIV_FIX, advised_caps, last_cap, missing_caps

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    kind = attach_kind()
    # Links need fewer capabilities; where a program would not even load for them,
    # what links need is what to name (perf-event uprobes need those and more).
    missing = missing_caps(status, last_cap(), kind.multi or (kind.denied and has_links()))
    if missing:
        raise LoadError("not allowed to load BPF programs: missing " + ", ".join(missing),
                        PRIV_FIX)
    if kind.denied:  # every capability held, and still refused: seccomp, an LSM
        raise LoadError(f"not allowed to load BPF programs: {kind.why}",
                        "a seccomp profile or security module refuses bpf() to these "
                        "capabilities; a container runtime's default profile may allow it "
                        "only with CAP_SYS_ADMIN: give noop a profile that allows bpf() "
                        "with CAP_BPF and perf_event_open() with CAP_PERFMON "
                        "(deploy/kubernetes/seccomp-profile), or add CAP_SYS_ADMIN")
    for name, why in advised_caps(status):
        if name not in _WARNED:
            _WARNED.add(name)
            logs.say(f"warning: without {name}, {why}", logs.WARNING)


_WARNED: set[str] = set()
