"""The VictoriaMetrics/metrics preset's probes on updates: where each update of a
counter, float counter, histogram or summary is one instruction of the program, and
what is read there (for ``noop --binary`` in the terminal, and ``noop run --mirror
both``'s update counts; the mirror reads every value from memory without them).

- ``Counter``'s ``Inc``, ``Dec``, ``Add`` (and ``AddInt64`` where the library has it)
  are one ``lock xadd`` on ``Counter.n`` (inlined into every caller: each copy is
  searched within its own code ranges only, as the program's inlining records give
  them), probed on the instruction after it (the kernel will not probe a LOCK one): the
  source register holds the old value there. Where another path joins that instruction
  (or it cannot be probed), on the instruction just before the xadd when only it leads
  there (``c.n`` read before the update). ``Set`` is one ``xchg``, probed on itself (its
  source register holds the new value).
- ``FloatCounter``'s ``Add``, ``Sub`` and ``Set``, ``Histogram.Update`` and
  ``Summary.Update`` store the new float value or sum (``movsd``) under their mutex:
  probed after that store, on the first one-byte ``nop`` (emulated: Go's mark of the
  inlined ``Unlock``) that straight-line code reaches from it with the struct's register
  unchanged, else on the instruction right after it. The value there is the struct's,
  read under its lock: exact. The observed value itself is in an XMM register, which a
  uprobe cannot read: histograms and summaries show their sum (and a summary its count).

Each site's tag is ``kind.Method``; the event's ``object`` is the metric's address, which
the mirror's walk names (``library.objects``): the update carries no name of its own."""

from __future__ import annotations

from collections.abc import Iterator

from agent.binary import sites
from agent.binary.amd64 import full_register
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.fetches import Decode, Fetch, Op
from agent.plan.model import Aggregate, ProbePlan, Site, ValueSpec
from agent.presets.client_golang.facts import MAX_ROWS, TARGET
from agent.presets.vmetrics.facts import COLUMNS, PKG, RULES, Rule
from agent.presets.vmetrics.layout import Layout


def probes(b: Binary, lay: Layout, aggregate: bool) -> tuple[list[ProbePlan], list[str]]:
    """The update probes of ``b`` (with ``aggregate``, each folding its hits into rows
    by process, object and site), and what they cannot see, said once."""
    out: list[ProbePlan] = []
    unseen: list[str] = []
    for rule in RULES:
        found, missed = _sites(b, lay, rule)
        unseen += missed
        if not found:
            continue
        values = tuple(v for v, _f in found[0][1])
        plan = ProbePlan(rule.probe, TARGET, values, tuple(s for s, _v in found))
        if aggregate:
            from dataclasses import replace

            plan = replace(plan, aggregate=Aggregate(("$pid", "object", "$site"),
                                                     COLUMNS[rule.probe], MAX_ROWS, True))
        out.append(plan)
    return out, unseen


Pairs = list[tuple[ValueSpec, Fetch]]


def _sites(b: Binary, lay: Layout, rule: Rule) -> tuple[list[tuple[Site, Pairs]], list[str]]:
    field = {"Counter": lay.counter_n, "FloatCounter": lay.float_n, "Histogram": lay.h_sum,
             "Summary": lay.s_sum}[rule.struct]
    out: list[tuple[Site, Pairs]] = []
    missed: list[str] = []
    seen: set[int] = set()
    for method, fn, insns, ranges in _regions(b, rule):
        targets = {i.target for i in insns if i.target is not None}
        for n, i in enumerate(insns):
            if i.address in seen or not any(lo <= i.address < hi for lo, hi in ranges):
                continue
            base = _update(i, rule.what, field)
            if base is None:
                continue
            seen.add(i.address)
            at = _site(insns, n, rule.what, base[0], targets)
            where = f"{method} inlined into {fn}" \
                if fn != f"{PKG}.(*{rule.struct}).{method}" else fn
            early = False
            if at is None and rule.what == "xadd":  # another path joins after it
                at, early = _before(insns, n, base[0], targets), True
            if at is None:
                missed.append(f"the update at {i.address:#x} ({where}): another path joins "
                              "the instruction after it, and none before it leads only to "
                              "it: not counted")
                continue
            pairs = _values(rule, lay, base[0], base[1], early)
            if rule.kind == "summary":  # whether the count read there includes this one
                done = _counted(insns, n, at, base[0], lay.s_count)
                pairs.append((ValueSpec("counted", "uint", 8, 0, "int", "the count is "
                                        "incremented before the site"),
                              Fetch("const", offset=int(done))))
            how = sites.handling(at.raw)
            what = {"xadd": "after the lock xadd", "xchg": "at the xchg",
                    "store": "after the store"}[rule.what] if not early else \
                "before the lock xadd (another path joins the instruction after it)"
            name = "sum" if rule.kind in ("histogram", "summary") else "n"
            out.append((Site(fn, at.address, b.elf.file_offset(at.address),
                             f"{what} on {rule.struct}.{name} at {i.address:#x} "
                             f"({where}; {how})",
                             tuple(f for _v, f in pairs), handling=how,
                             tag=f"{rule.kind}.{method}"), pairs))
    return out, missed


Region = tuple[str, str, tuple[sites.Insn, ...], list[tuple[int, int]]]


def _regions(b: Binary, rule: Rule) -> Iterator[Region]:
    """Each method's own code, then each copy of it inlined into another function:
    (method, the function whose code it is, its instructions, the copy's ranges)."""
    for method in rule.methods:
        fn = f"{PKG}.(*{rule.struct}).{method}"
        sym = b.functions.symbols.get(fn)
        if sym is None:
            try:
                copies = b.functions.inlined(fn)
            except NoopError:
                continue
        else:
            if sym.size:
                yield method, fn, b.instructions(fn), [(sym.address, sym.address + sym.size)]
            try:
                copies = b.functions.inlined(fn)
            except NoopError:
                copies = ()
        for copy in copies:
            caller = b.function_at(copy.entry)
            if caller is not None:
                yield method, caller, b.instructions(caller), b.dwarf.ranges(copy.die)


def _update(i: sites.Insn, what: str, field: int) -> tuple[str, str] | None:
    """(base register, source register) of ``i`` when it is the rule's update of the
    field at ``field`` from a base register (no index)."""
    if what in ("xadd", "xchg"):
        if i.mnemonic != what or (what == "xadd" and not i.lock):
            return None
    elif i.mnemonic != "movsd":
        return None
    ops = i.operands
    if len(ops) != 2 or ops[0][0] != "mem" or ops[1][0] != "reg":
        return None
    mem, reg = ops[0], ops[1][1]
    if mem[2] or not mem[1] or mem[1] in ("rsp", "rip") or mem[3] != field:
        return None
    if what != "store" and not reg.startswith("r"):  # 8-byte general registers only
        return None
    if what == "store" and not reg.startswith("xmm"):
        return None
    return str(mem[1]), str(reg)


def _site(insns: tuple[sites.Insn, ...], n: int, what: str, base: str,
          targets: set[int]) -> sites.Insn | None:
    """Where the update at ``insns[n]`` is probed: the xchg itself; after an xadd, the
    next instruction; after a store, the first one-byte nop straight-line code reaches
    with ``base`` unchanged, else the next instruction. None when another path joins
    the site (its hits would not all be updates)."""
    if what == "xchg":
        return insns[n]
    if n + 1 >= len(insns) or insns[n + 1].address in targets or \
            sites.handling(insns[n + 1].raw) == sites.REFUSED:  # a LOCK one: no uprobe
        return None
    if what == "store":
        for k in range(n + 1, min(n + 8, len(insns))):
            j = insns[k]
            if k > n + 1 and j.address in targets:
                break
            if sites.handling(j.raw) == sites.EMULATED and j.mnemonic == "nop":
                return j
            # not past a branch, a write of the struct's register or a LOCK instruction
            # (the inlined Unlock's: the value would be read outside the lock)
            if sites.is_branch(j) or j.lock or _writes(j, base):
                break
    return insns[n + 1]


def _before(insns: tuple[sites.Insn, ...], n: int, base: str, targets: set[int]
            ) -> sites.Insn | None:
    """For the xadd at ``insns[n]`` whose next instruction another path joins (or cannot
    be probed): the instruction just before it, when it only leads to it (not a branch,
    the xadd no branch target) and ``base`` is already what the xadd uses; else None."""
    if n == 0 or insns[n].address in targets:
        return None
    j = insns[n - 1]
    if sites.is_branch(j) or j.mnemonic in ("ret", "int3") or \
            sites.handling(j.raw) == sites.REFUSED or _writes(j, base):
        return None
    return j


def _writes(i: sites.Insn, reg: str) -> bool:
    """Whether ``i`` writes the 64-bit register ``reg`` or a part of it."""
    return any(full_register(r) == reg for r in i.writes)


def _counted(insns: tuple[sites.Insn, ...], n: int, site: sites.Insn, base: str,
             offset: int) -> bool:
    """Whether the code from the store at ``insns[n]`` to ``site`` writes the field at
    ``offset`` from ``base`` (a summary's count, incremented after its sum)."""
    for j in insns[n + 1:]:
        if j.address >= site.address:
            return False
        if j.mnemonic in ("inc", "add", "mov") and j.operands and \
                j.operands[0] == ("mem", base, "", offset):
            return True
    return False


def _values(rule: Rule, lay: Layout, base: str, src: str, early: bool = False) -> Pairs:
    obj = (ValueSpec("object", "addr", 8, 0, "pointer", "the metric"),
           Fetch("reg", size=8, regs=(base,)))

    def mem(name: str, offset: int, decode: Decode, what: str) -> tuple[ValueSpec, Fetch]:
        return (ValueSpec(name, decode, 8, 0, "uint64" if decode == "uint" else "float64",
                          what),
                Fetch("mem", ops=(Op("reg", reg=base),), offset=offset, size=8))

    if rule.what == "xadd" and early:  # before it: the field as it is then
        return [obj, (ValueSpec("before", "uint", 8, 0, "uint64", "register (before)"),
                      Fetch("mem", ops=(Op("reg", reg=base),), offset=lay.counter_n,
                            size=8)),
                (ValueSpec("now", "uint", 8, 0, "uint64", "c.n"),
                 Fetch("unavailable", why="read before the update"))]
    if rule.what == "xadd":  # the old value left in the source register
        return [obj, (ValueSpec("before", "uint", 8, 0, "uint64", "register (before)"),
                      Fetch("reg", size=8, regs=(src,))),
                mem("now", lay.counter_n, "uint", "c.n")]
    if rule.what == "xchg":  # the new value, about to be stored
        return [obj, (ValueSpec("new", "uint", 8, 0, "uint64", "register (new)"),
                      Fetch("reg", size=8, regs=(src,)))]
    if rule.struct == "FloatCounter":
        return [obj, mem("value", lay.float_n, "float", "fc.n")]
    if rule.kind == "histogram":
        return [obj, mem("sum", lay.h_sum, "float", "h.sum")]
    return [obj, mem("sum", lay.s_sum, "float", "sm.sum"),
            mem("count", lay.s_count, "uint", "sm.count")]
