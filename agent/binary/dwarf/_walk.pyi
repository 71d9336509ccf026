# Types of the C walk (_walk.c): tree.Tree and asks call it where it was built.
from collections.abc import Callable

from _typeshed import ReadableBuffer

def walk(info: ReadableBuffer, first: int, end: int, unit: int, osize: int, asize: int,
         refaddr: int, str_base: int, index: ReadableBuffer, entries: ReadableBuffer,
         offsets: ReadableBuffer, line_str: ReadableBuffer
         ) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bool] | None: ...
def origins(inlined: ReadableBuffer, ats: ReadableBuffer, refs: ReadableBuffer,
            ranges: ReadableBuffer) -> tuple[bytes, bytes]: ...
def codes(todo: ReadableBuffer, ats: ReadableBuffer, tags: ReadableBuffer,
          parents: ReadableBuffer, names: ReadableBuffer) -> bytes: ...
def qualify(todo: ReadableBuffer, ats: ReadableBuffer, tags: ReadableBuffer,
            parents: ReadableBuffer, names: ReadableBuffer, nested: bool,
            known: dict[int, str], decode: Callable[[int, int], str | None]
            ) -> list[str | None] | None: ...
def group(copies: ReadableBuffer, keys: ReadableBuffer, resolve: Callable[[int], int]
          ) -> dict[int, list[int]]: ...
def fold(pairs: ReadableBuffer, table: dict[int, list[int]], signed: bool) -> None: ...
