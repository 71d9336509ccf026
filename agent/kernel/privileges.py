"""The capabilities loading BPF programs and attaching uprobes needs, read from
/proc/self/status; what to tell a user who lacks them (load and doctor both say it).

Which ones depends on how the uprobes go on (``attach.attach_kind``, found by trying):
uprobe_multi links (Linux 6.6) need CAP_BPF and CAP_PERFMON, to load the programs;
perf-event uprobes need CAP_SYS_ADMIN, since the 2025 fix for CVE-2025-38466 refuses
a uprobe perf event without it, CAP_BPF and CAP_PERFMON or not. CAP_SYS_ADMIN stands
for both of the others (the kernel's bpf_capable() and perfmon_capable() accept it).
"""

from __future__ import annotations

from pathlib import Path

PRIV_FIX = ("run as root, or with CAP_BPF and CAP_PERFMON where the kernel makes "
            "uprobe_multi links (Linux >= 6.6), else CAP_SYS_ADMIN; and CAP_SYS_PTRACE "
            "CAP_DAC_READ_SEARCH to reach every target")

SYS_ADMIN, PERFMON, BPF = 21, 38, 39
NAMES = {SYS_ADMIN: "CAP_SYS_ADMIN", PERFMON: "CAP_PERFMON", BPF: "CAP_BPF"}
CAPS = NAMES  # every capability that can be needed, by bit
# Not needed to load and attach, but without them some targets are out of reach.
ADVISED = {19: ("CAP_SYS_PTRACE", "processes of other users, or with capabilities noop "
                "lacks, cannot be followed through /proc/PID/root and /proc/PID/exe"),
           2: ("CAP_DAC_READ_SEARCH", "a target binary that only its owner may read "
               "cannot be resolved")}


def last_cap() -> int:
    """The highest capability this kernel knows (CAP_BPF is 39, from 5.8)."""
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def _effective(status_text: str) -> int:
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def needed(multi: bool, last_cap: int = 40) -> tuple[int, ...]:
    """The capabilities attaching needs, by bit: CAP_BPF and CAP_PERFMON for links
    (where the kernel knows them: 5.8), else CAP_SYS_ADMIN."""
    if multi and last_cap >= BPF:
        return PERFMON, BPF
    return (SYS_ADMIN,)


def missing_caps(status_text: str, last_cap: int = 40, multi: bool = False
                 ) -> tuple[str, ...]:
    """Names of the capabilities noop needs (attaching through links or not) that CapEff
    lacks; CAP_SYS_ADMIN held stands for any of them."""
    eff = _effective(status_text)
    if eff >> SYS_ADMIN & 1:
        return ()
    return tuple(NAMES[bit] for bit in needed(multi, last_cap) if not eff >> bit & 1)


def held(status_text: str, last_cap: int = 40) -> tuple[str, ...]:
    """The capabilities of ``CAPS`` that CapEff has."""
    eff = _effective(status_text)
    return tuple(NAMES[bit] for bit in sorted(NAMES) if bit <= last_cap and eff >> bit & 1)


def can_read_memory(status_text: str) -> bool:
    """Whether CapEff holds CAP_SYS_PTRACE: what reading another process's memory
    (process_vm_readv) needs, unless it is noop's own child under Yama's default."""
    return bool(_effective(status_text) >> 19 & 1)


def advised_caps(status_text: str) -> tuple[tuple[str, str], ...]:
    """(name, what goes wrong without it) of each advised capability CapEff lacks."""
    eff = _effective(status_text)
    return tuple(ADVISED[bit] for bit in sorted(ADVISED) if not eff >> bit & 1)
