"""Demangle Rust symbol names into ``crate::path::name``, as a Rust programmer writes
them: the legacy scheme (``_ZN...17h<hash>E``, rustc's default for a crate's own
functions) and the v0 scheme (``_R...``, the standard library's), hashes and crate
disambiguators left out, and the suffixes LLVM adds (``.llvm.<N>``) dropped.

The v0 grammar is rustc's (RFC 2603): paths, generic arguments, types and constants,
with back-references into the symbol. Output follows the alternate form of the
``rustc-demangle`` crate (what ``llvm-cxxfilt`` prints): ``<T as Trait>::method``,
``f::<u8>`` for a generic function, ``{closure#0}``. No Python library keeps up with
the v0 scheme, so it is read here.
"""

from __future__ import annotations

import functools
import re

_ESCAPES = {"$LT$": "<", "$GT$": ">", "$RF$": "&", "$BP$": "*", "$C$": ",", "$SP$": "@",
            "$LP$": "(", "$RP$": ")", "$u20$": " ", "$u27$": "'", "$u5b$": "[",
            "$u5d$": "]", "$u7b$": "{", "$u7d$": "}", "$u7e$": "~", "$u3b$": ";",
            "$u2b$": "+", "$u22$": '"'}
_ESCAPE_RE = re.compile(r"(\$(?:LT|GT|RF|BP|C|SP|LP|RP|u[0-9a-f]{2})\$)")
_DIGITS = re.compile(r"\d+")
_HASH_RE = re.compile(r"h[0-9a-f]{16}")
# LLVM's suffixes on a local symbol it promotes, and noop's own on a second function of
# one name (agent.binary.elf: NAME@0xADDRESS).
_SUFFIX_RE = re.compile(r"(?:\.(?:llvm|lto_priv)\.\d+|@0x[0-9a-f]+)$")


def demangle(symbol: str) -> str | None:
    """The Rust name of ``symbol`` (legacy or v0), or None when it is not one."""
    if not symbol.startswith(("_R", "_ZN")):  # the suffixes are at the end
        return None
    symbol = strip_suffix(symbol)
    if symbol.startswith("_R"):
        return demangle_rust_v0(symbol)
    return demangle_rust_legacy(symbol)


def strip_suffix(symbol: str) -> str:
    """``symbol`` without the ``.llvm.<N>`` that LLVM gives a local symbol it promotes,
    or the ``@0x<address>`` noop gives a second function of one name."""
    if "." not in symbol and "@" not in symbol:  # most symbols: no suffix to look for
        return symbol
    return _SUFFIX_RE.sub("", symbol)


def demangle_rust_legacy(symbol: str) -> str | None:
    """``_ZN1m6shapes1P3get17h63cb5a0094254cadE`` -> ``m::shapes::P::get``; None otherwise."""
    symbol = strip_suffix(symbol)
    if not symbol.startswith("_ZN") or not symbol.endswith("E"):
        return None
    pos, end = 3, len(symbol) - 1
    parts: list[str] = []
    while pos < end:
        m = _DIGITS.match(symbol, pos, end)
        if m is None:
            return None
        n = int(m.group())
        pos += len(m.group())
        if n == 0 or pos + n > end:
            return None
        parts.append(symbol[pos:pos + n])
        pos += n
    if len(parts) < 2 or not _HASH_RE.fullmatch(parts[-1]):
        return None
    return "::".join(_unescape(p) for p in parts[:-1])


@functools.lru_cache(maxsize=1 << 16)
def _unescape(part: str) -> str:
    """A path component with its escapes read; cached, since a binary's symbols repeat
    a few thousand components (``core``, ``ptr``, ``drop_in_place$LT$...``) tens of
    thousands of times."""
    if "$" not in part:
        return part.replace("..", "::")
    if part.startswith("_$"):
        part = part[1:]
    pieces = _ESCAPE_RE.split(part.replace("..", "::"))  # text, escape, text, ...
    pieces[1::2] = [_ESCAPES.get(e, e) for e in pieces[1::2]]
    return "".join(pieces)


def demangle_rust_v0(symbol: str) -> str | None:
    """``_RNvCs6FjgIYWtyp0_3std4main`` -> ``std::main``; None when it is not v0."""
    symbol = strip_suffix(symbol)
    if not symbol.startswith("_R") or len(symbol) < 3 or not symbol[2].isupper():
        return None  # a leading decimal is a future version of the scheme
    symbol, dot, suffix = symbol.partition(".")  # another suffix (.0, .cold) is kept
    try:
        p = _V0(symbol[2:])
        out = p.path(in_value=True)
        if p.peek() and p.peek().isupper():
            p.path(in_value=False)  # the instantiating crate, not shown
    except _Bad:
        return None
    if p.pos != len(p.s):
        return None
    return f"{out} ({dot}{suffix})" if dot else out


class _Bad(Exception):
    pass


_BASIC = {"a": "i8", "b": "bool", "c": "char", "d": "f64", "e": "str", "f": "f32",
          "h": "u8", "i": "isize", "j": "usize", "l": "i32", "m": "u32", "n": "i128",
          "o": "u128", "s": "i16", "t": "u16", "u": "()", "v": "...", "x": "i64",
          "y": "u64", "z": "!", "p": "_"}
_SIGNED = frozenset("alnsxi")
_UNSIGNED = frozenset("hmotyj")
_B62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


class _V0:
    """A recursive-descent reader of one v0 symbol (after ``_R``)."""

    def __init__(self, text: str, pos: int = 0, depth: int = 0, bound: int = 0) -> None:
        self.s = text
        self.pos = pos
        self.depth = depth
        self.bound = bound  # lifetimes bound by the enclosing ``for<...>``
        if depth > 200:
            raise _Bad("too deep")

    # -- lexing --------------------------------------------------------------------
    def peek(self) -> str:
        return self.s[self.pos] if self.pos < len(self.s) else ""

    def next(self) -> str:
        c = self.peek()
        if not c:
            raise _Bad("unexpected end")
        self.pos += 1
        return c

    def eat(self, c: str) -> bool:
        if self.peek() == c:
            self.pos += 1
            return True
        return False

    def base62(self) -> int:
        if self.eat("_"):
            return 0
        value = 0
        while not self.eat("_"):
            c = self.next()
            if c not in _B62:
                raise _Bad("not base 62")
            value = value * 62 + _B62.index(c)
        return value + 1

    def opt_number(self, tag: str) -> int:
        return self.base62() + 1 if self.eat(tag) else 0

    def decimal(self) -> int:
        start = self.pos
        if self.eat("0"):
            return 0
        while self.peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise _Bad("no number")
        return int(self.s[start:self.pos])

    def ident(self) -> str:
        punycode = self.eat("u")
        n = self.decimal()
        self.eat("_")
        if self.pos + n > len(self.s):
            raise _Bad("identifier past the end")
        raw = self.s[self.pos:self.pos + n]
        self.pos += n
        if punycode:
            raw = _punycode(raw)
        return raw

    def backref(self) -> _V0:
        at = self.base62()
        if at >= self.pos - 1:
            raise _Bad("back-reference forward")
        return _V0(self.s, at, self.depth + 1, self.bound)

    # -- grammar -------------------------------------------------------------------
    def path(self, in_value: bool) -> str:
        tag = self.next()
        if tag == "C":
            self.opt_number("s")
            return self.ident()
        if tag == "N":
            ns = self.next()
            inner = self.path(in_value)
            dis = self.opt_number("s")
            name = self.ident()
            if ns.isupper():
                kind = {"C": "closure", "S": "shim"}.get(ns, ns)
                return f"{inner}::{{{kind}{':' + name if name else ''}#{dis}}}"
            return f"{inner}::{name}" if name else inner
        if tag in ("M", "X"):  # an impl: its own path is not shown
            self.opt_number("s")
            self.path(False)
            t = self.type()
            if tag == "M":
                return f"<{t}>"
            return f"<{t} as {self.path(False)}>"
        if tag == "Y":
            t = self.type()
            return f"<{t} as {self.path(False)}>"
        if tag == "I":
            inner = self.path(in_value)
            args = []
            while not self.eat("E"):
                args.append(self.generic_arg())
            return f"{inner}{'::' if in_value else ''}<{', '.join(args)}>"
        if tag == "B":
            return self.backref().path(in_value)
        raise _Bad(f"path tag {tag!r}")

    def generic_arg(self) -> str:
        if self.eat("L"):
            return self.lifetime(self.base62())
        if self.eat("K"):
            return self.const()
        return self.type()

    def type(self) -> str:
        tag = self.next()
        if tag in _BASIC:
            return _BASIC[tag]
        if tag in ("R", "Q"):
            n = self.base62() if self.eat("L") else 0
            life = f"{self.lifetime(n)} " if n else ""
            return f"&{life}{'mut ' if tag == 'Q' else ''}{self.type()}"
        if tag in ("P", "O"):
            return f"*{'const' if tag == 'P' else 'mut'} {self.type()}"
        if tag == "A":
            t = self.type()
            return f"[{t}; {self.const()}]"
        if tag == "S":
            return f"[{self.type()}]"
        if tag == "T":
            items = []
            while not self.eat("E"):
                items.append(self.type())
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if tag == "F":
            return self.fn_sig()
        if tag == "D":
            bounds = self.dyn_bounds()
            bound = self.base62() if self.eat("L") else 0
            return f"dyn {bounds}" + (f" + {self.lifetime(bound)}" if bound else "")
        if tag == "B":
            return self.backref().type()
        self.pos -= 1
        return self.path(False)

    def binder(self) -> tuple[str, int]:
        """A ``for<'a, ...>`` binder: its text, and how many lifetimes it binds."""
        n = self.opt_number("G")
        names = []
        for _ in range(n):
            self.bound += 1
            names.append(self.lifetime(1))
        return (f"for<{', '.join(names)}> " if n else ""), n

    def lifetime(self, n: int) -> str:
        """A lifetime by its de Bruijn index among the bound ones ('_ for 0)."""
        if n == 0:
            return "'_"
        depth = self.bound - n
        if depth < 0:
            raise _Bad("unbound lifetime")
        return f"'{chr(ord('a') + depth)}" if depth < 26 else f"'_{depth}"

    def fn_sig(self) -> str:
        binder, n = self.binder()
        unsafe = self.eat("U")
        abi = ""
        if self.eat("K"):
            abi = "C" if self.eat("C") else self.ident().replace("_", "-")
        params = []
        while not self.eat("E"):
            params.append(self.type())
        ret = self.type()
        self.bound -= n
        head = binder + ("unsafe " if unsafe else "") + (f'extern "{abi}" ' if abi else "")
        return f"{head}fn({', '.join(params)})" + ("" if ret == "()" else f" -> {ret}")

    def dyn_bounds(self) -> str:
        binder, n = self.binder()
        traits = []
        while not self.eat("E"):
            path = self.path(False)
            bindings = []
            while self.eat("p"):
                name = self.ident()
                bindings.append(f"{name} = {self.type()}")
            if bindings:
                path = path[:-1] + ", " + ", ".join(bindings) + ">" if path.endswith(">") \
                    else f"{path}<{', '.join(bindings)}>"
            traits.append(path)
        self.bound -= n
        return binder + " + ".join(traits)

    def const(self) -> str:
        if self.eat("p"):
            return "_"
        if self.eat("B"):
            return self.backref().const()
        tag = self.next()
        if tag in _SIGNED or tag in _UNSIGNED:
            negative = tag in _SIGNED and self.eat("n")
            value = self.hex()
            return f"{'-' if negative else ''}{value}"
        if tag == "b":
            return {0: "false", 1: "true"}.get(self.hex()) or _bad("bool")
        if tag == "c":
            return repr(chr(self.hex()))
        raise _Bad(f"const {tag!r}")

    def hex(self) -> int:
        start = self.pos
        while self.peek() and self.peek() in "0123456789abcdef":
            self.pos += 1
        digits = self.s[start:self.pos]
        if not self.eat("_"):
            raise _Bad("hex without end")
        return int(digits, 16) if digits else 0


def _bad(what: str) -> str:
    raise _Bad(what)


def _punycode(raw: str) -> str:
    """An identifier's punycode (``_`` stands for ``-``), decoded to Unicode."""
    basic, _, rest = raw.rpartition("_")
    try:
        return (f"{basic}-{rest}" if basic else rest).encode().decode("punycode")
    except UnicodeError as exc:
        raise _Bad("punycode") from exc
