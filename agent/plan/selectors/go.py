"""Go's interfaces in selectors: ``x.(T)`` enters the value an interface holds while it
holds a T, an interface read whole is the name of its dynamic type, and ``err.Error()``
reads the message of the error types that keep it first; the types are told apart by
the addresses of their descriptors in the binary.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from functools import cached_property

from elftools.dwarf.die import DIE

from agent.binary.amd64 import is_vector
from agent.binary.dwarf.dies import attr
from agent.errors import NoopError
from agent.plan.fetches import Fetch, Op
from agent.plan.selectors.kinds import Types
from agent.plan.selectors.places import (
    Mem,
    Pieces,
    Place,
    Regs,
    Selected,
    SelectError,
    Seq,
    bytes_fetch,
    follow,
)

DW_AT_GO_RUNTIME_TYPE = 0x2904  # a Go type's descriptor, as an offset from runtime.types
# Error types whose Error() is their first field, a string: err.Error() reads it.
ERROR_TYPES = ("*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors")


class GoSteps(Types):
    """The steps of a selector into a Go interface."""

    def _interface(self, tdie: DIE | None, path: str, what: str) -> bool:
        """Whether the interface at ``path`` has methods (``tab, data``: its first word
        is an itab, whose type is at +8) rather than none (``_type, data``)."""
        if self.kind(tdie) != "interface":
            raise SelectError(f"{path} is {self.namer.name(tdie)}, not a Go interface: "
                              f"{what} needs one", "drop it")
        return "tab" in self.members(tdie)

    @cached_property
    def _types_start(self) -> int | None:
        """Where the binary's type descriptors start (``runtime.types``): DWARF gives a
        type's descriptor as an offset from it."""
        from agent.binary.gometa.program import GoProgram
        if self.dwarf.elf.e_type == 3:  # ET_DYN: a PIE moves the descriptors at load
            return None
        try:
            return GoProgram(self.dwarf.elf).module.types
        except (NoopError, ValueError, KeyError, IndexError, struct.error):
            sym = self.dwarf.elf.symbol("runtime.types")
            return sym.address if sym is not None else None

    def runtime_type(self, name: str, path: str) -> tuple[int, DIE]:
        """The address of Go type ``name``'s descriptor, and the DWARF entry of the
        value an interface holding one points to (``*T``: T; T: T)."""
        from agent.binary.dwarf.lookup import find_type
        pointer = name.startswith("*")
        try:
            die = find_type(self.dwarf, name)
            value = self._target(die) if pointer else die
        except NoopError as exc:
            # DWARF may have no entry for a pointer type no variable has (``&Order{}``
            # stored in an ``any``) while the binary has its descriptor.
            try:
                if not pointer:
                    raise
                die, value = None, find_type(self.dwarf, name[1:])
            except NoopError:
                raise SelectError(f"{path}.({name}): {exc.message}", exc.hint or
                                  "name the type as Go's DWARF does: *main.Order, "
                                  "*errors.errorString, *github.com/org/pkg.Type") from None
        offset = attr(die, DW_AT_GO_RUNTIME_TYPE) if die is not None else None
        if self._types_start is None:
            raise SelectError(f"{path}.({name}): noop finds no Go type descriptors at "
                              "fixed addresses in this binary (a position-independent "
                              "build has none)", "build without -buildmode=pie")
        address = self._types_start + offset if isinstance(offset, int) \
            else self._descriptors.get(name)
        if address is None or value is None:
            raise SelectError(f"{path}.({name}): the binary keeps no type descriptor of "
                              f"{name}, so no interface can hold one",
                              "a type never converted to an interface has none")
        return address, value

    @cached_property
    def _descriptors(self) -> dict[str, int]:
        """The binary's type descriptors by the name Go's DWARF gives their type."""
        from agent.binary.gometa.program import GoProgram
        try:
            return {t.name: t.address for t in GoProgram(self.dwarf.elf).types.all}
        except (NoopError, ValueError, KeyError, IndexError, struct.error):
            return {}

    def _is_type(self, place: Place, iface: bool, values: tuple[int, ...]
                 ) -> Place:
        """``place`` (an interface) kept only while its dynamic type is one of
        ``values`` (absent when nil or another)."""
        op = Op("itype", index=int(iface), values=values)
        if isinstance(place, Mem):
            return Mem((*place.ops, replace(op, offset=place.offset)), place.offset)
        if isinstance(place, Regs) and not place.add:
            word = place.covering(0, 8)
            reg = word.pieces[0][2] if word is not None else None
            if reg and not is_vector(reg):
                return Regs(place.pieces, (*place.guards, replace(op, reg=reg)))
        return None

    def _data(self, place: Place) -> Mem | None:
        """What an interface's data word points to."""
        return follow(place.covering(8, 8) if isinstance(place, Regs) else
                      Mem(place.ops, place.offset + 8) if isinstance(place, Mem) else None)

    def _assert(self, place: Place, tdie: DIE | None, name: str, path: str
                ) -> tuple[Place, DIE | None]:
        """Go's ``x.(T)``: the value inside the interface, absent unless it holds a T."""
        iface = self._interface(tdie, path, f"the type assertion .({name})")
        address, value = self.runtime_type(name, path)
        # The data word points to the value: a *T's T, or the copy of a T.
        return self._data(self._is_type(place, iface, (address,))), value

    def _dynamic_type(self, place: Place, tdie: DIE | None, tname: str,
                      path: str, unavailable: str) -> Selected:
        """An interface read whole: the name of its dynamic type (``nil``), from the type
        descriptor its first word is (or, with methods, its itab points to)."""
        iface = self._interface(tdie, path, "reading its type")
        if self._types_start is None:
            raise SelectError(f"{path} is {tname}: noop finds no Go type descriptors at "
                              "fixed addresses in this binary to name its dynamic type "
                              "(a position-independent build has none)",
                              "build without -buildmode=pie, or read .(TYPE) fields")
        slot = int(iface)
        if isinstance(place, Mem):
            fetch = Fetch("gotype", place.ops, place.offset, 8, slot=slot)
        elif isinstance(place, Pieces) and isinstance(place.covering(0, 8), Mem):
            word = place.covering(0, 8)
            assert isinstance(word, Mem)
            fetch = Fetch("gotype", word.ops, word.offset, 8, slot=slot)
        elif isinstance(place, Regs) and not place.add and place.covering(0, 8):
            word = place.covering(0, 8)
            assert word is not None
            fetch = Fetch("gotype", place.guards, regs=(word.pieces[0][2] or "",), slot=slot)
        else:
            fetch = Fetch("unavailable", why=unavailable)
        return Selected(fetch, "gotype", 8, 0, tname)

    def _error_text(self, place: Place, tdie: DIE | None, decode: str | None,
                    cap: int, path: str, unavailable: str) -> Selected:
        """``err.Error()`` where it is a field read: the message string of the error
        types ERROR_TYPES (each keeps it first); absent for nil and any other type."""
        iface = self._interface(tdie, path, ".Error()")
        found = []
        for name in ERROR_TYPES:
            try:
                found.append(self.runtime_type(name, path)[0])
            except SelectError:
                continue
        if not found:
            raise SelectError(f"{path}.Error(): none of the error types noop reads as a "
                              f"message ({', '.join(ERROR_TYPES)}) is in this binary",
                              f"read {path}.(TYPE).field of the error type it holds")
        if decode not in (None, "string"):
            raise SelectError(f"{path}.Error() is a string: it cannot be read as {decode}")
        struct_at = self._data(self._is_type(place, iface, tuple(found)))
        seq = Seq(0, 8, None, True)  # a Go string: pointer, then length
        return Selected(bytes_fetch(struct_at, "string", seq, unavailable), "string",
                        cap, cap, "string")
