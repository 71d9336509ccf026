"""The first lines of every generated program: the hand-written helpers of
``bpf/noop.h``, the event header's checks, and the maps every site's program shares
(the ring buffer, the per-probe counts, the hits per site and process, the process
each target is limited to, each address's generation), with the helpers a kernel
fact adds (attach cookies, the XMM reader)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from agent.kernel import events
from agent.plan.model import Plan

RINGBUF_PAGES = 256
RINGBUF_BYTES = RINGBUF_PAGES * 4096  # 1 MiB: BCC counts pages of the kernel's (x86) size
GENERATIONS = 65536  # addresses whose generation is kept; the least recently used go
TRAP_ROWS = 4096  # (site, process) pairs whose hits are counted apart; the rest per site
# BCC compiles calls of kernel helpers only by number, and no call of a kfunc: the C
# calls the XMM reader through this stand-in number, which the loader rewrites into a
# call of the kernel's own function (Program.calls) before the kernel sees it.
XMM_CALL = 0x6E6F6F70


def helpers_text() -> str:
    """bpf/noop.h, from the installed package or the source tree."""
    try:
        return resources.files("agent.bpf").joinpath("noop.h").read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return (Path(__file__).resolve().parents[2] / "bpf" / "noop.h").read_text()


def prelude(plan: Plan, xmm_helper: str | None, cookies: bool) -> list[str]:
    """The program's first lines: noop's helpers, the event header's checks, the maps
    every program shares (the ring, per-probe counts, hits, the process filter, the
    generations), and the helpers a kernel fact adds (attach cookies, XMM reads)."""
    n = max(1, len(plan.probes))
    lines = [helpers_text().rstrip(), "", "#include <linux/stddef.h>", "",
             *events.c_header_checks(), "",
             f"BPF_RINGBUF_OUTPUT(noop_events, {RINGBUF_PAGES});",
             f"BPF_PERCPU_ARRAY(noop_produced, u64, {n});  /* per probe: records made */",
             f"BPF_PERCPU_ARRAY(noop_lost, u64, {n});"
             "  /* per probe: records the ring buffer refused */",
             f"BPF_PERCPU_ARRAY(noop_faults, u64, {n});"
             "  /* per probe: user-memory read faults */",
             f"BPF_PERCPU_ARRAY(noop_unpaired, u64, {n});"
             "  /* per exit probe: returns without their call's entry */",
             f"BPF_PERCPU_ARRAY(noop_cancelled, u64, {n});"
             "  /* per exit probe on an async fn: futures dropped before they completed */",
             "", *traps_c(plan), *only_c(plan), *generations_c(plan)]
    if cookies:
        lines += ["/* bpf_get_attach_cookie (UAPI helper 174): the site index noop attached "
                  "the uprobe with */",
                  "static u64 (*noop_attach_cookie)(void *ctx) = (void *)174;", ""]
    if xmm_helper is not None:
        lines += [f"/* {xmm_helper}(dst, size, regno): the kernel's reader of the user's "
                  "XMM registers, called through a stand-in number noop links to it */",
                  "static long (*noop_xmm_read)(void *dst, u32 size, u32 regno) = "
                  f"(void *){XMM_CALL:#x};", ""]
    return lines


def trap_rows(plan: Plan) -> int:
    """Rows of noop_traps: a row per (site, process) up to TRAP_ROWS, and one per site
    (process 0) for the hits of processes past that."""
    n = sum(len(p.sites) for p in plan.probes)
    return n + min(TRAP_ROWS, 16 * n)


def traps_c(plan: Plan) -> list[str]:
    """The hit counter every program starts with: what the probes cost their targets
    (``cost``). Per site and process, in a per-CPU hash (exact whatever the threads);
    a process the map has no room for is counted in its site's row of process 0,
    which noop creates at load."""
    return ["struct noop_trapkey {", "\tu32 site;", "\tu32 pid;", "};",
            f"BPF_PERCPU_HASH(noop_traps, struct noop_trapkey, u64, {trap_rows(plan)});"
            "  /* hits per site and process */",
            "static __always_inline void noop_trap(u32 site)", "{",
            "\tstruct noop_trapkey k = {.site = site, .pid = bpf_get_current_pid_tgid() >> 32};",
            "\tu64 *n = noop_traps.lookup(&k);", "\tif (!n) {", "\t\tu64 one = 1;",
            "\t\tif (!noop_traps.insert(&k, &one))", "\t\t\treturn;",
            "\t\tn = noop_traps.lookup(&k);  /* another CPU made it meanwhile */",
            "\t}", "\tif (!n) {  /* no room: the site's row of process 0 */", "\t\tk.pid = 0;",
            "\t\tn = noop_traps.lookup(&k);", "\t}", "\tif (n)", "\t\t(*n)++;", "}", ""]


def only_c(plan: Plan) -> list[str]:
    """The process each target is limited to (``--pid``, a target's ``pid:``), set when
    loading (``agent.kernel.load``): the program is the same whatever the process, so
    one compile serves every one."""
    return [f"BPF_ARRAY(noop_only, u32, {max(1, len(plan.targets))});"
            "  /* per target: the one process probed; 0: every one */",
            "static __always_inline int noop_left_out(u32 target)", "{",
            "\tu32 *only = noop_only.lookup(&target);",
            "\treturn only && *only && (bpf_get_current_pid_tgid() >> 32) != *only;", "}", ""]


def generations_c(plan: Plan) -> list[str]:
    """The table of each address's generation, by process: when a renew site last saw
    it given to or taken from an object; what ``generation`` fetches read (none when the
    plan has no renew site)."""
    if not any(p.renews for p in plan.probes):
        return []
    return ["struct noop_genkey {", "\tu64 pid;", "\tu64 object;", "};",
            f'BPF_TABLE("lru_hash", struct noop_genkey, u64, noop_generations, {GENERATIONS});'
            "  /* (process, address) -> when another object's time there began */", ""]
