"""Rust's types in selectors, read as a Rust programmer writes them: one step of
auto-deref (references, Box, Arc and Rc, the ``Some`` of an Option, a Mutex's or
RefCell's value, single-field wrappers), entering an enum's variant (absent while
another is active), an enum read as the name of its active variant, and an async fn's
future (what it captured and where its state is).
"""

from __future__ import annotations

from dataclasses import dataclass

from elftools.dwarf.die import DIE

from agent.binary.amd64 import is_vector
from agent.binary.dwarf.dies import attr, die_name
from agent.plan.fetches import Op, decode_of
from agent.plan.selectors.kinds import Enum, Types, Variant
from agent.plan.selectors.places import (
    Mem,
    Pieces,
    Place,
    Regs,
    Selected,
    SelectError,
    part,
    scalar_fetch,
)


@dataclass(frozen=True, slots=True)
class Future:
    """An async fn's future: its type, the arguments it captured, where its state is
    (offset and size in it) and the values of the states by name."""

    type: str
    args: tuple[str, ...]
    state: int
    size: int
    states: dict[str, int]


# The state of a Rust future that has not been polled yet: its async fn's call starts.
FIRST_POLL = "Unresumed"

# Rust types that hold their value in one named member (besides their lock or count).
_HOLDERS = {"Mutex": "data", "RwLock": "data", "RefCell": "value", "ArcInner": "data",
            "RcInner": "value", "RcBox": "value", "OnceCell": "inner"}
_RC = ("alloc::sync::Arc<", "alloc::rc::Rc<", "alloc::sync::Weak<", "alloc::rc::Weak<")


class RustSteps(Types):
    """The steps of a selector through Rust's types."""

    def future(self, pinned: DIE | None) -> Future | None:
        """An async fn's future, from its poll's ``self`` (``Pin<&mut
        {async_fn_env#0}>``): what it captured (the members of its ``Unresumed``
        variant) and where its state is; None when the type is not such a future."""
        d = self.namer.strip(pinned)
        for _ in range(8):
            if d is None:
                return None
            if self.kind(d) == "pointer":
                d = self.namer.strip(self._target(d))
                continue
            e = self._enum(d)
            if e is not None:
                first = next((v for v in e.variants if v.name == FIRST_POLL), None)
                if first is None or e.discr is None:
                    return None
                states = {v.name: v.value for v in e.variants if v.value is not None}
                return Future(self.namer.name(d), tuple(self.members(first.type)),
                              e.discr[0], e.discr[1], states)
            sized = [m for m in self.members(d).values() if self._size(m[1]) > 0]
            if len(sized) != 1:
                return None
            d = self.namer.strip(sized[0][1])
        return None

    def _enter(self, place: Place, tdie: DIE | None, e: Enum, v: Variant,
               path: str) -> tuple[Place, DIE | None]:
        """Into variant ``v`` of an enum at ``place``: absent while another is active."""
        if e.discr is not None:
            doff, dsize = e.discr
            if dsize not in (1, 2, 4, 8):
                raise SelectError(f"{path} is {self.namer.name(tdie)}, whose discriminant "
                                  f"takes {dsize} bytes: noop reads up to 8")
            values, negate = e.guard(v)
            if isinstance(place, Mem):
                place = Mem((*place.ops, Op("when", offset=place.offset + doff, size=dsize,
                                            values=values, negate=negate)), place.offset)
            elif isinstance(place, Pieces) or (isinstance(place, Regs) and place.add):
                place = None  # an address, not an enum; or pieces no guard reads
            elif isinstance(place, Regs):
                # The discriminant in the low bytes of one register, or not readable here.
                reg = next((r for o, s, r in place.pieces if o == doff and s >= dsize), None)
                place = Regs(place.pieces, (*place.guards, Op(
                    "when", reg=reg, size=dsize, values=values, negate=negate))) \
                    if reg and not is_vector(reg) else None
        return self._member(place, (v.offset, v.type))

    def _unwrap(self, place: Place, tdie: DIE | None, path: str
                ) -> tuple[Place, DIE | None] | None:
        """One step of Rust's auto-deref: through a reference or Box, an Arc or Rc, the
        ``Some`` of an Option, a Mutex's or RefCell's value, a single-field wrapper."""
        kind = self.kind(tdie)
        d = self.namer.strip(tdie)
        if kind == "pointer":
            return self._deref(place, tdie, path)
        if kind == "enum":
            some = self._option(d)
            e = self._enum(d)
            if some is None or e is None:
                return None
            place, tdie = self._enter(place, d, e, some, path)
            inner = self.members(tdie).get("__0")
            return self._member(place, inner) if inner else None
        if kind != "struct" or d is None:
            return None
        m = self.members(d)
        if self.namer.name(d).startswith(_RC) and "ptr" in m:
            place, t = self._member(place, m["ptr"])
            for _ in range(8):  # NonNull<ArcInner<T>> down to the pointer, then in
                if self.kind(t) == "pointer":
                    place, t = self._deref(place, t, path)
                    fields = self.members(t)
                    held = next((fields[k] for k in ("data", "value") if k in fields), None)
                    return self._member(place, held) if held else (place, t)
                step = self._single(place, t)
                if step is None:
                    return None
                place, t = step
            return None
        holder = _HOLDERS.get((die_name(d) or "").split("<")[0])
        if holder and holder in m:
            return self._member(place, m[holder])
        return self._single(place, d)

    def _single(self, place: Place, d: DIE | None
                ) -> tuple[Place, DIE | None] | None:
        """The one member that holds data of a wrapper (NonNull, Cell, AtomicU64, ...)."""
        if self.kind(d) != "struct":
            return None
        sized = [m for m in self.members(d).values() if self._size(m[1]) > 0]
        return self._member(place, sized[0]) if len(sized) == 1 else None

    def _held(self, place: Place, tdie: DIE | None, decode: str | None,
              path: str) -> tuple[Place, DIE | None, str | None]:
        """A Rust value read whole: the value its references and wrappers hold, with its
        decoding (an ``AtomicBool`` reads as a bool)."""
        # References, Box, wrappers, Arc, Option: to the value they hold (``as:
        # addr`` keeps a reference's address; raw pointers are not followed).
        for _ in range(32):
            d = self.namer.strip(tdie)
            kind = self.kind(d)
            if kind == "pointer" and (decode == "addr" or self._target(d) is None
                                      or self.namer.name(d).startswith("*")):
                break
            if kind not in ("struct", "enum", "pointer") or \
                    (kind == "enum" and self._option(d) is None):
                break
            if decode is None and self.namer.name(d) == "core::sync::atomic::AtomicBool":
                decode = "bool"
            step = self._unwrap(place, tdie, path)
            if step is None:
                break
            place, tdie = step
        if decode not in (None, "addr") and self.kind(tdie) == "pointer":
            place, tdie = self._deref(place, tdie, path)
        return place, tdie, decode

    def _variant(self, place: Place, tdie: DIE | None, decode: str | None,
                 path: str, unavailable: str) -> Selected:
        """A Rust enum read as the name of its active variant (``as: int``: the number
        that selects it)."""
        d = self.namer.strip(tdie)
        tname = self.namer.name(tdie)
        e = self._enum(d)
        if e is None and d is not None:  # fieldless: DW_TAG_enumeration_type
            size = self._size(d)
            names = tuple((attr(c, "DW_AT_const_value"), die_name(c) or "?")
                          for c in d.iter_children() if c.tag == "DW_TAG_enumerator")
            other = None
        elif e is not None and e.discr is not None:
            doff, size = e.discr
            if isinstance(place, Regs):  # in the low bytes of one register
                reg = next((r for o, s, r in place.pieces if o == doff and s >= size), None)
                place = Regs(((0, size, reg),), place.guards) if reg else None
            else:
                place = part(place, doff, size)
            names = tuple((v.value, v.name) for v in e.variants if v.value is not None)
            other = next((v.name for v in e.variants if v.value is None), None)
        else:
            only = e.variants[0].name if e and e.variants else "?"
            raise SelectError(f"{path} is {tname}, which has one variant, {only}",
                              f"read a field of it: .{only}.<field>")
        if size not in (1, 2, 4, 8):
            raise SelectError(f"{path} is {tname}, whose discriminant takes {size} bytes: "
                              "noop reads up to 8")
        mask = (1 << 8 * size) - 1
        names = tuple((int(v) & mask, n) for v, n in names if isinstance(v, int))
        if decode in ("int", "uint"):
            return Selected(scalar_fetch(place, size, unavailable), decode_of(decode),
                            size, 0, tname)
        if decode not in (None, "string"):
            raise SelectError(f"{path} is {tname}: it cannot be read as {decode}",
                              "an enum reads as the name of its variant, or as int")
        return Selected(scalar_fetch(place, size, unavailable), "variant", size, 0,
                        tname, names, other)
