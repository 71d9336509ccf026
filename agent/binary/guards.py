"""Where to probe an update that only some paths make, before it: the conditional jump
that guards it (the kernel emulates a jcc: cheap), keeping the hits whose flags go the
update's way, or else the first instruction of the straight code that leads to it; and
how the registers the update uses are read there.

Used where the instruction after the update cannot be probed: another path joins there
(``if failed { errors.inc() }`` compiles to ``jcc skip; ...; lock incq [..]; skip:``),
so a probe there would count the paths that skipped the update too.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.binary import sites
from agent.binary.amd64 import full_register
from agent.binary.sites import Insn

CF, PF, ZF, SF, OF = 0x1, 0x4, 0x40, 0x80, 0x800  # eflags
# The conditional jumps a uprobe's flag test can follow: taken when any of these flags
# is set, or taken when none of them is. The signed ones (jl, jge, jle, jg) compare SF
# with OF: no test of "any set" or "none set" tells them.
_ANY = {"jb": CF, "je": ZF, "jbe": CF | ZF, "js": SF, "jo": OF, "jp": PF}
_NONE = {"jae": CF, "jne": ZF, "ja": CF | ZF, "jns": SF, "jno": OF, "jnp": PF}
_ENDS = ("jmp", "ret", "ud2", "int3", "hlt")  # no way on past these


@dataclass(frozen=True, slots=True)
class Reg:
    """A register's value at the update, as read at the earlier site: ``reg`` there,
    then through ``derefs`` (each: a = *(a + d)), plus ``add``."""

    reg: str
    derefs: tuple[int, ...] = ()
    add: int = 0

    def __str__(self) -> str:
        text = self.reg
        for d in self.derefs:
            text = f"[{text}{d:+#x}]" if d else f"[{text}]"
        return text + (f"{self.add:+#x}" if self.add else "")


@dataclass(frozen=True, slots=True)
class Before:
    """A site before the update at which every hit kept is one update: ``skip_flags``
    drops hits with any of these flags set, ``keep_flags`` keeps only hits with one of
    them set (both 0: every hit). ``regs``: each register the update uses, as read
    there."""

    site: Insn
    regs: tuple[tuple[str, Reg], ...]
    skip_flags: int
    keep_flags: int
    why: str

    def reg(self, name: str) -> Reg:
        return dict(self.regs)[name]


def before(insns: tuple[Insn, ...], n: int, need: tuple[str, ...],
           plain: tuple[str, ...] = ()) -> Before | str:
    """The site before ``insns[n]`` that sees it exactly once (a string: why there is
    none), reading the registers ``need`` there; those in ``plain`` must be a register
    as it is (not a pointer loaded on the way)."""
    entries: dict[int, list[int]] = {}
    for k, i in enumerate(insns):
        if i.target is not None and i.mnemonic != "call":
            entries.setdefault(i.target, []).append(k)
    regs = {r: Reg(r) for r in need}
    start = n  # the straight code to the update: insns[start..n], entered only at start
    while start > 0 and insns[start].address not in entries:
        prev = insns[start - 1]
        if prev.mnemonic.startswith("j") or prev.mnemonic in (*_ENDS, "call"):
            break
        moved = _through(prev, regs, plain)
        if moved is None:  # prev computes what the update needs: start after it
            return _first(insns, start, n, regs, f"{prev.mnemonic} at {prev.address:#x} "
                          "computes what the update uses")
        regs = moved
        start -= 1
    into = entries.get(insns[start].address, [])
    above = insns[start - 1] if start > 0 else None
    falls = above is not None and above.mnemonic not in _ENDS
    if falls and not into and above is not None and above.mnemonic.startswith("j"):
        return _guard(above, False, regs, insns[n]) or \
            _first(insns, start, n, regs, f"{above.mnemonic} tests no flag noop follows")
    if not falls and len(into) == 1 and insns[into[0]].mnemonic != "jmp":
        jcc = insns[into[0]]
        return _guard(jcc, True, regs, insns[n]) or \
            _first(insns, start, n, regs, f"{jcc.mnemonic} tests no flag noop follows")
    why = "other paths join before it" if into else "no conditional jump leads to it"
    return _first(insns, start, n, regs, why)


def _guard(jcc: Insn, taken: bool, regs: dict[str, Reg], update: Insn) -> Before | None:
    """The site at conditional jump ``jcc``, keeping the hits that go to the update:
    ``taken``, those that jump (it jumps to the update's code), else those that fall
    through; None when its condition is not one the flag test follows."""
    if jcc.mnemonic in _ANY:
        mask, any_set = _ANY[jcc.mnemonic], True
    elif jcc.mnemonic in _NONE:
        mask, any_set = _NONE[jcc.mnemonic], False
    else:
        return None
    keep = mask if any_set == taken else 0
    skip = 0 if keep else mask
    way = "jumps to it" if taken else "falls through to it"
    return Before(jcc, tuple(sorted(regs.items())), skip, keep,
                  f"at the {jcc.mnemonic} at {jcc.address:#x} that guards the update at "
                  f"{update.address:#x} (the hits where it {way})" + _read(regs))


def _first(insns: tuple[Insn, ...], start: int, n: int, regs: dict[str, Reg], why: str
           ) -> Before | str:
    """The first instruction of the straight code to the update, every hit of it one
    update (nothing else enters that code), if it is not the update itself and the
    kernel can probe it."""
    if start >= n:
        return f"no conditional jump guards it where noop can read what it uses ({why})"
    site = insns[start]
    if sites.handling(site.raw) == sites.REFUSED:
        return f"the kernel refuses a uprobe on {site.mnemonic} at {site.address:#x}"
    return Before(site, tuple(sorted(regs.items())), 0, 0,
                  f"at {site.mnemonic} at {site.address:#x}, where the straight code to the "
                  f"update at {insns[n].address:#x} starts ({why})" + _read(regs))


def _read(regs: dict[str, Reg]) -> str:
    moved = [f"{r} as {v}" for r, v in sorted(regs.items()) if v != Reg(r)]
    return f", reading {', '.join(moved)}" if moved else ""


def _through(i: Insn, regs: dict[str, Reg], plain: tuple[str, ...]) -> dict[str, Reg] | None:
    """The registers the update uses as read before ``i`` (which runs before it), or
    None when ``i`` changes one in a way not followed back: only a copy from another
    register, a load of a pointer (``mov r, [base + d]``), ``lea r, [base + d]`` and
    adding a constant are; and a LOCK instruction or a call stops it."""
    if i.lock or i.mnemonic == "call":
        return None
    out = dict(regs)
    for name, v in regs.items():
        if full_register(v.reg) not in (full_register(w) for w in i.writes):
            continue
        if not i.operands or i.operands[0] != ("reg", v.reg) or len(i.operands) != 2:
            return None
        src = i.operands[1]
        wide = v.reg.startswith("r") and not v.reg.endswith(("d", "w", "b"))
        if not wide:
            return None
        if i.mnemonic == "mov" and src[0] == "reg" and str(src[1]).startswith("r") and \
                not str(src[1]).endswith(("d", "w", "b")):
            out[name] = Reg(src[1], v.derefs, v.add)
        elif name in plain:
            return None
        elif i.mnemonic == "mov" and src[0] == "mem" and _based(src) and _qword(i):
            out[name] = Reg(src[1], (src[3], *v.derefs), v.add)
        elif i.mnemonic == "lea" and src[0] == "mem" and _based(src):
            out[name] = _plus(Reg(src[1], v.derefs, v.add), src[3])
        elif i.mnemonic in ("add", "sub") and src[0] == "imm":
            out[name] = _plus(v, src[1] if i.mnemonic == "add" else -src[1])
        else:
            return None
    return out


def _plus(v: Reg, d: int) -> Reg:
    """``v`` with its register d larger than it will be."""
    if v.derefs:
        return Reg(v.reg, (v.derefs[0] + d, *v.derefs[1:]), v.add)
    return Reg(v.reg, (), v.add + d)


def _based(mem: tuple[object, ...]) -> bool:
    """A memory operand through a general register (not rip, rsp), no index."""
    return bool(mem[1]) and not mem[2] and mem[1] not in ("rip", "rsp", "rbp")


def _qword(i: Insn) -> bool:
    raw = i.raw.lstrip(bytes([0x66, 0xF2, 0xF3]))
    return bool(raw) and 0x48 <= raw[0] <= 0x4F
