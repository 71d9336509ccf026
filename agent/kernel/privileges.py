"""The capabilities loading BPF programs and attaching uprobes needs, read from
/proc/self/status; what to tell a user who lacks them (load and doctor both say it)."""

from __future__ import annotations

PRIV_FIX = ("run as root, or with CAP_SYS_ADMIN (and CAP_SYS_PTRACE CAP_DAC_READ_SEARCH "
            "to reach every target)")


# CAP_SYS_ADMIN: kernels with the 2025 uprobe fix refuse a uprobe perf event for every
# process without it, CAP_BPF and CAP_PERFMON or not; and it stands for both of those
# (the kernel's bpf_capable() and perfmon_capable() accept it), so they add nothing.
CAPS = {21: "CAP_SYS_ADMIN"}
# Not needed to load and attach, but without them some targets are out of reach.
ADVISED = {19: ("CAP_SYS_PTRACE", "processes of other users, or with capabilities noop "
                "lacks, cannot be followed through /proc/PID/root and /proc/PID/exe"),
           2: ("CAP_DAC_READ_SEARCH", "a target binary that only its owner may read "
               "cannot be resolved")}


def _effective(status_text: str) -> int:
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def missing_caps(status_text: str, last_cap: int = 40) -> tuple[str, ...]:
    """Names of the capabilities noop needs that CapEff lacks."""
    eff = _effective(status_text)
    return tuple(n for bit, n in sorted(CAPS.items()) if bit <= last_cap and not eff >> bit & 1)


def advised_caps(status_text: str) -> tuple[tuple[str, str], ...]:
    """(name, what goes wrong without it) of each advised capability CapEff lacks."""
    eff = _effective(status_text)
    return tuple(ADVISED[bit] for bit in sorted(ADVISED) if not eff >> bit & 1)
