"""Go type descriptors (internal/abi/type.go): for every type a program puts in an
interface or reflects on, its kind, size and alignment, its elements, a struct's fields
with names and offsets, and a named type's methods with their signatures.

Types are read from the roots the runtime keeps (typelinks and itabs; from Go 1.27 the
descriptors laid out from ``types``), then from every type they refer to. Each gets
the name Go's DWARF gives it: package paths in full (``*github.com/…/prometheus.Desc``),
where the descriptor's own string has only the package's last element.
"""

from __future__ import annotations

import bisect
import re
import struct
from functools import cached_property

from agent.binary.elf import uleb128
from agent.binary.gometa.gotype import (
    ARRAY,
    BOOL,
    CHAN,
    FUNC,
    INTERFACE,
    MAP,
    POINTER,
    SLICE,
    STRUCT,
    UNSAFE_POINTER,
    Field,
    GoType,
    Method,
)
from agent.binary.gometa.image import Corrupt, Image
from agent.binary.gometa.moduledata import ModuleData
from agent.binary.gometa.typenames import full_name

_KIND_MASK = 0x1F
_TFLAG_UNCOMMON, _TFLAG_EXTRA_STAR, _TFLAG_NAMED = 1, 2, 4
_BASE = struct.Struct("<QQIBBBBQQii")  # abi.Type: 48 bytes
_METHOD = struct.Struct("<iiii")
# A package qualifier inside a type's string: a name followed by a dot, at the start or
# after a character that cannot end a path element.
_QUALIFIER = re.compile(r"(^|[^\w./])([A-Za-z_]\w*)\.")
# A package path up to its last element: "github.com/a/" of "github.com/a/b.T".
_PATHS = re.compile(r"(?<![\w~-])(?:\w[\w.~-]*/)+(?=[\w.~-]*\.)")
# A named type's name, as DWARF gives it: its package's path, a dot, its own name.
_NAMED = re.compile(r"(?P<package>[\w.~/-]+)\.(?P<type>\w+)")


class Types:
    """The type descriptors of one Go binary, read on first use."""

    def __init__(self, image: Image, module: ModuleData, go_version: tuple[int, int],
                 settings: dict[str, str]) -> None:
        self.image = image
        self.md = module
        self.version = go_version
        experiments = settings.get("GOEXPERIMENT", "")
        # Go 1.24 made maps Swiss tables (internal/runtime/maps), unless built with
        # GOEXPERIMENT=noswissmap (gone in 1.26)
        self.swiss = go_version >= (1, 24) and "noswissmap" not in experiments
        if go_version >= (1, 27):
            self._map_size = 136
        elif self.swiss:
            self._map_size = 112
        else:
            self._map_size = 88
        self._by_address: dict[int, GoType] = {}
        self._pending: list[GoType] = []

    def _fail(self, what: str, at: int) -> Corrupt:
        return Corrupt(f"{self.image.elf.path}: a type descriptor's {what} at {at:#x} is "
                       "outside the binary", "the binary is damaged")

    # -- names ---------------------------------------------------------------------

    def _name_at(self, at: int) -> tuple[str, bool, str, int]:
        """(name, embedded, tag, pkgpath nameOff or 0) of the encoded name at ``at``."""
        head = self.image.read(at, 1 + 10, "a name")
        flags = head[0]
        n, pos = uleb128(head, 1)
        data = self.image.read(at + pos, n, "a name")
        end = pos + n
        tag = ""
        if flags & 2:
            raw = self.image.read(at + end, 10, "a tag")
            tn, tpos = uleb128(raw, 0)
            tag = self.image.read(at + end + tpos, tn, "a tag").decode(errors="replace")
            end += tpos + tn
        pkg = 0
        if flags & 4:
            (pkg,) = struct.unpack("<i", self.image.read(at + end, 4, "a name"))
        return data.decode(errors="replace"), bool(flags & 8), tag, pkg

    def _name_off(self, off: int) -> str:
        return self._name_at(self.md.types + off)[0] if off else ""

    # -- descriptors ---------------------------------------------------------------

    def at(self, address: int) -> GoType:
        """The type whose descriptor is at ``address``, with every type it refers to."""
        t = self._shell(address)
        while self._pending:  # a worklist: type graphs are deep and cyclic
            self._fill(self._pending.pop())
        return t

    def _shell(self, address: int) -> GoType:
        got = self._by_address.get(address)
        if got is not None:
            return got
        if not self.md.types <= address < self.md.etypes:
            raise self._fail("reference", address)
        (size, _ptrdata, _hash, tflag, align, _falign, kind, _eq, _gc, str_off,
         _ptr_to) = self._head(address)
        kind &= _KIND_MASK
        if not BOOL <= kind <= UNSAFE_POINTER:
            raise Corrupt(f"{self.image.elf.path}: a type descriptor at {address:#x} has kind "
                          f"{kind}, which Go does not have", "the binary is damaged")
        t = GoType(address, kind, size, align, bool(tflag & _TFLAG_NAMED),
                   self._short(tflag, str_off))
        t.tflag = tflag
        self._by_address[address] = t
        self._pending.append(t)
        return t

    def _head(self, address: int) -> tuple[int, ...]:
        """The common header (abi.Type) of the descriptor at ``address``."""
        return _BASE.unpack(self.image.read(address, _BASE.size, "a type descriptor"))

    def _short(self, tflag: int, str_off: int) -> str:
        """A descriptor's own string: ``*prometheus.counter``."""
        short = self._name_off(str_off)
        return short[1:] if tflag & _TFLAG_EXTRA_STAR else short

    def _fill(self, t: GoType) -> None:
        extra = self._kind_fields(t)
        if t.tflag & _TFLAG_UNCOMMON:
            self._uncommon(t, t.address + extra)
        if t.kind == FUNC:
            self._func_params(t, t.address + extra + (16 if t.tflag & _TFLAG_UNCOMMON else 0))

    def _ptr(self, at: int) -> GoType | None:
        p = self.image.pointer(at)
        return self._shell(p) if p else None

    def _kind_fields(self, t: GoType) -> int:
        """Reads what follows the common header; returns the kind's descriptor size."""
        a, k = t.address + _BASE.size, t.kind
        if k in (POINTER, SLICE):
            t.elem = self._ptr(a)
            return 56
        if k == ARRAY:
            t.elem = self._ptr(a)
            t.length = self.image.pointer(a + 16)
            return 72
        if k == CHAN:
            t.elem = self._ptr(a)
            t.chan_dir = self.image.pointer(a + 8)
            return 64
        if k == MAP:
            t.key, t.elem = self._ptr(a), self._ptr(a + 8)
            t.bucket_at = self.image.pointer(a + 16)  # read when asked (Types.bucket)
            return self._map_size
        if k == FUNC:
            return 56
        if k == STRUCT:
            ptr, n = self._package_and_list(t, a, "field list")
            for i in range(n):
                fname, ftype, off = self.image.words(ptr + 24 * i, 3)
                name_s, embedded, _tag, _pkg = self._name_at(fname)
                if self.version < (1, 19):  # offsetEmbed: offset << 1 | embedded
                    embedded, off = bool(off & 1), off >> 1
                t.fields.append(Field(name_s, self._shell(ftype), off, embedded))
            return 80
        if k == INTERFACE:
            ptr, n = self._package_and_list(t, a, "method list")
            for i in range(n):
                name_off, typ_off = struct.unpack("<ii", self.image.read(ptr + 8 * i, 8))
                sig = self._shell(self.md.types + typ_off) if typ_off > 0 else None
                mname, _e, _t, pkg = self._name_at(self.md.types + name_off)
                if not mname[:1].isupper() and (pkg or t.pkgpath):
                    # DWARF writes an unexported method with its package
                    mname = f"{self._name_off(pkg) if pkg else t.pkgpath}.{mname}"
                t.imethods.append((mname, sig))
            return 80
        return _BASE.size

    def _package_and_list(self, t: GoType, a: int, what: str) -> tuple[int, int]:
        """A struct's or interface's package path (set on ``t``), then where its fields
        or methods are and how many."""
        name = self.image.pointer(a)
        if name:
            t.pkgpath = self._name_at(name)[0]
        ptr, n, _cap = self.image.words(a + 8, 3)
        if n > 1 << 16:
            raise self._fail(what, a)
        return ptr, n

    def _uncommon(self, t: GoType, at: int) -> None:
        pkg_off, mcount, _xcount, moff, _ = struct.unpack(
            "<iHHII", self.image.read(at, 16, "a type's method table"))
        if pkg_off:
            t.pkgpath = self._name_off(pkg_off)
        if mcount > 1 << 14:
            raise self._fail("method table", at)
        raw = self.image.read(at + moff, _METHOD.size * mcount, "a type's method table")
        for i in range(mcount):
            name_off, mtyp, _ifn, tfn = _METHOD.unpack_from(raw, i * _METHOD.size)
            sig = self._shell(self.md.types + mtyp) if mtyp not in (0, -1) else None
            code = self.md.text + tfn if tfn not in (0, -1) else 0
            t.methods.append(Method(self._name_off(name_off), sig, code))

    def _func_params(self, t: GoType, at: int) -> None:
        n_in, n_out = struct.unpack("<HH", self.image.read(t.address + _BASE.size, 4))
        t.variadic = bool(n_out & 0x8000)
        n_out &= 0x7FFF
        ptrs = self.image.words(at, n_in + n_out)
        t.params = [self._shell(p) for p in ptrs[:n_in]]
        t.results = [self._shell(p) for p in ptrs[n_in:]]

    # -- the graph -----------------------------------------------------------------

    @cached_property
    def all(self) -> tuple[GoType, ...]:
        """Every type reachable from the runtime's roots, named as DWARF names them."""
        self._read_all()
        types = tuple(self._by_address.values())
        for t in types:
            t.name = full_name(t, set(), self._qualify)
        return types

    def _read_all(self) -> None:
        for root in self._roots():
            self.at(root)

    def find(self, name: str) -> GoType | None:
        """The type DWARF names ``name``, read with what it refers to and no more: a
        binary search in typelinks (sorted by the descriptors' own strings) for its
        string, and for its pointer's (the linker keeps ``*T`` of every named ``T``
        with a descriptor). None when neither is there; without typelinks (Go 1.27),
        from every type."""
        if "all" in self.__dict__ or not self.md.typelinks:
            return next((t for t in self.all if t.name == name), None)
        short = _PATHS.sub("", name)
        for string, pointer in ((short, False), ("*" + short, True)):
            for at in self._typelinks_with(string):
                found = self.at(at)
                t = found.elem if pointer else found
                if t is not None and self.name(t) == name:
                    return t
        if name.startswith("*"):  # a pointer: the one its element's descriptor names
            elem = self.find(name[1:])
            return self.pointer_to(elem) if elem is not None else None
        named = _NAMED.fullmatch(name)
        if named is None:  # a composite type whose packages' names may not be their paths'
            return next((t for t in self.all if t.name == name), None)
        # A package named other than its path's last element (go-jmespath's is jmespath):
        # every typelink whose string names a type of this name in some package.
        for at in self._by_tail.get(named["type"], ()):
            t = self.at(at)
            for c in (t, t.elem) if t.kind == POINTER else (t,):
                if c is not None and self.name(c) == name:
                    return c
        return None

    @cached_property
    def _by_tail(self) -> dict[str, list[int]]:
        """Typelinks whose string names a named type (``pkg.T``, ``*pkg.T``), by ``T``."""
        out: dict[str, list[int]] = {}
        for at in self.md.typelinks:
            named = _NAMED.fullmatch(self._string(at).removeprefix("*"))
            if named is not None:
                out.setdefault(named["type"], []).append(at)
        return out

    def bucket(self, t: GoType) -> GoType | None:
        """The struct a map of type ``t`` keeps its entries in: a bucket (``topbits``,
        ``keys``, ``elems``, ``overflow``) before Go 1.24, a group (``ctrl``, then
        ``slots`` of ``key`` and ``elem``, or ``keys`` and ``elems``) after."""
        return self.at(t.bucket_at) if t.kind == MAP and t.bucket_at else None

    def pointer_to(self, t: GoType) -> GoType | None:
        """The type ``*t`` if the binary has its descriptor (``t``'s ``ptrToThis``)."""
        ptr_to = self._head(t.address)[-1]
        p = self.at(self.md.types + ptr_to) if ptr_to > 0 else None
        return p if p is not None and p.kind == POINTER and p.elem is t else None

    def name(self, t: GoType) -> str:
        """``t``'s name as DWARF gives it (set on ``t``)."""
        if not t.name:
            t.name = full_name(t, set(), self._qualify)
        return t.name

    def _typelinks_with(self, string: str) -> list[int]:
        """The typelinks whose descriptor's string is ``string``."""
        links = self.md.typelinks
        lo = bisect.bisect_left(links, string, key=self._string)
        out = []
        while lo < len(links) and self._string(links[lo]) == string:
            out.append(links[lo])
            lo += 1
        return out

    def _string(self, address: int) -> str:
        got = self._by_address.get(address)
        if got is not None:
            return got.short
        head = self._head(address)
        return self._short(head[3], head[9])

    def _roots(self) -> list[int]:
        roots = list(self.md.typelinks)
        if self.md.typedesclen:  # Go 1.27: descriptors one after another from types + 8
            at, end = self.md.types + 8, self.md.types + self.md.typedesclen
            while at < end:
                at = (at + 7) & ~7
                t = self.at(at)
                at += self._descriptor_size(t)
        for _itab, inter, typ in self.itabs():
            roots += [p for p in (inter, typ) if p]
        return roots

    def itabs(self) -> list[tuple[int, int, int]]:
        """(address, interface type, concrete type) of every itab the linker made (a
        conversion the compiler saw); those made at run time are not in the binary."""
        out = []
        for itab in self.md.itabs:
            inter, typ = self.image.words(itab, 2)
            out.append((itab, inter, typ))
        if self.md.typedesclen:  # Go 1.27: itabs one after another in the types
            at = self.md.types + self.md.itab_offset
            end = at + self.md.itab_size
            while at < end:
                inter, typ = self.image.words(at, 2)
                out.append((at, inter, typ))
                n = len(self.at(inter).imethods) if inter else 0
                at += 24 + 8 * max(n, 1)  # itab: inter, _type, hash+pad, fun[n]
        return out

    def _kind_size(self, kind: int) -> int:
        """The size of a descriptor of ``kind`` before its method table."""
        return {POINTER: 56, SLICE: 56, ARRAY: 72, CHAN: 64, MAP: self._map_size,
                FUNC: 56, STRUCT: 80, INTERFACE: 80}.get(kind, _BASE.size)

    def _descriptor_size(self, t: GoType) -> int:
        size = self._kind_size(t.kind)
        if t.tflag & _TFLAG_UNCOMMON:
            size += 16 + _METHOD.size * len(t.methods)
        # Go 1.27 keeps each kind's variable part inside the descriptor.
        size += {FUNC: 8 * (len(t.params) + len(t.results)), STRUCT: 24 * len(t.fields),
                 INTERFACE: 8 * len(t.imethods)}.get(t.kind, 0)
        return size

    @cached_property
    def _packages(self) -> dict[str, str]:
        """Full package paths by their last element, where that is unambiguous."""
        paths: dict[str, set[str]] = {}
        for pkgpath in self._package_paths():
            paths.setdefault(pkgpath.rsplit("/", 1)[-1], set()).add(pkgpath)
        # "go" is also the start of the compiler's own go.shape names.
        return {k: next(iter(v)) for k, v in paths.items() if len(v) == 1 and k != "go"}

    def _package_paths(self) -> set[str]:
        """The package of every named type: of those ``all`` reads, or, without reading
        them all, of the named types of typelinks' pointers (every named type with a
        descriptor has its pointer's there)."""
        if "all" in self.__dict__ or not self.md.typelinks:
            self._read_all()
            return {t.pkgpath for t in self._by_address.values() if t.named and t.pkgpath}
        out = set()
        for at in self.md.typelinks:
            if self._head(at)[6] & _KIND_MASK != POINTER:
                continue
            elem = self.image.pointer(at + _BASE.size)
            if not elem:
                continue
            got = self._by_address.get(elem)
            pkgpath = got.pkgpath if got is not None and got.named else \
                self._named_package(elem)
            if pkgpath:
                out.add(pkgpath)
        return out

    def _named_package(self, address: int) -> str:
        """The package path of the type at ``address`` if it is named ('' if not), read
        from its descriptor alone (as ``_shell`` and ``_fill`` would set it)."""
        head = self._head(address)
        tflag, kind = head[3], head[6] & _KIND_MASK
        if not tflag & _TFLAG_NAMED:
            return ""
        pkgpath = ""
        if kind in (STRUCT, INTERFACE):
            name = self.image.pointer(address + _BASE.size)
            pkgpath = self._name_at(name)[0] if name else ""
        if tflag & _TFLAG_UNCOMMON:
            size = self._kind_size(kind)
            (pkg_off,) = struct.unpack("<i", self.image.read(address + size, 4,
                                                             "a type's method table"))
            pkgpath = self._name_off(pkg_off) if pkg_off else pkgpath
        return pkgpath

    def _qualify(self, text: str) -> str:
        """``text`` with each short package qualifier (``abi.Type``) made full."""
        packages = self._packages
        return _QUALIFIER.sub(lambda m: m.group(1) + packages.get(m.group(2), m.group(2)) + ".",
                              text)
