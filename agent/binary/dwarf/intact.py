"""What a binary's DWARF must be for noop to read it, beyond its units' headers (which
``scan.damage`` checks): string sections that are strings, and units that hold their
DIEs rather than point to a split-off ``.dwo`` file.

A string section that is not one gives empty or garbled names (a parameter shown as
``~p0 ?``) rather than an error. A compiler or linker never writes there a run of
sixteen NULs (nor a section of NULs only), a control character or bytes that are not
UTF-8, nor ends it without a NUL: each says the bytes were overwritten or cut.
Split DWARF (``-gsplit-dwarf``) leaves in the binary only a skeleton unit per source
file, naming the ``.dwo`` file that holds its functions and types, which noop does not
read (pyelftools follows no reference into one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.binary.dwarf.sections import Window, section_bytes

RUN = 16  # NUL bytes in a row no string section holds (compilers' hold at most 1)
_CHUNK = 4 << 20
AT_COMP_DIR, AT_DWO_NAME, AT_GNU_DWO_NAME = 0x1B, 0x76, 0x2130
SPLIT_ATTRIBUTES = (AT_COMP_DIR, AT_DWO_NAME, AT_GNU_DWO_NAME)


def strings_damage(sections: dict[str, Any]) -> str:
    """What is wrong with the string sections (name -> pyelftools' section, None when
    absent): '' when nothing."""
    for name, section in sections.items():
        if section is None or not section.size:
            continue
        read = _reader(section)
        if read(section.size - 1, 1) != b"\0":
            return f"its {name} does not end with a NUL (cut off or overwritten)"
        why = _not_strings(read, section.size)
        if why:
            return f"its {name} {why}: names read from it would be wrong"
    return ""


def _reader(section: Any) -> Callable[[int, int], bytes]:
    stream = section.stream
    if isinstance(stream, Window):
        return stream.pread
    data = section_bytes(section)
    return lambda at, n: data[at:at + n]


_CONTROL = bytes([*range(0x01, 0x09), *range(0x0E, 0x20), 0x7F])


def _not_strings(read: Callable[[int, int], bytes], size: int) -> str:
    """What in the section is not a run of UTF-8 strings ('' when nothing): a run of
    ``RUN`` NULs, a control character, or bytes that are not UTF-8; read a few MB at a
    time, each piece cut after a NUL so that no character is split."""
    run = bytes(RUN)
    at = 0
    while at < size:
        chunk = read(at, _CHUNK)
        if at + len(chunk) < size:
            chunk = chunk[:chunk.rfind(b"\0") + 1] or chunk
        if 1 < size <= RUN and not chunk.strip(b"\0"):
            return "is NUL bytes only (overwritten with zeros)"
        found = chunk.find(run)
        if found >= 0:
            return f"holds {RUN} or more NUL bytes in a row at +{at + found:#x} " \
                "(overwritten with zeros)"
        if len(chunk.translate(None, _CONTROL)) != len(chunk):
            bad = next(i for i, c in enumerate(chunk) if c in _CONTROL)
            return f"holds a control character at +{at + bad:#x} (overwritten)"
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"holds bytes that are not UTF-8 at +{at + exc.start:#x} (overwritten)"
        at += len(chunk)
    return ""


def split_units(tops: list[dict[int, str | None]], binary: Path) -> tuple[int, str, bool]:
    """Of the units whose own DIEs' string attributes are ``tops`` (DW_AT_dwo_name or
    its GNU form, DW_AT_comp_dir): how many are skeletons of split DWARF, the first
    one's .dwo file, and whether it exists (as named, beside the binary, or under the
    unit's compilation directory)."""
    split = [t for t in tops if t.get(AT_DWO_NAME) or t.get(AT_GNU_DWO_NAME)]
    if not split:
        return 0, "", False
    first = split[0]
    name = first.get(AT_DWO_NAME) or first.get(AT_GNU_DWO_NAME) or ""
    places = [Path(name)] if os.path.isabs(name) else [
        Path(first.get(AT_COMP_DIR) or ".") / name, binary.parent / name]
    return len(split), name, any(p.is_file() for p in places)
