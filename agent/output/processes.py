"""Every target process's process_* series, read from /proc at each scrape
(``agent.live.procstat``) and labelled with its ``target`` and ``pid`` as the mirror's
series are: under the names and help of the process collector the program registered
(client_golang's, its Namespace or a wrapping's prefix and labels), or client_golang's
defaults when it registered none; none for a program whose process collector reports
another process (a PidFn of its own)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from agent.live import procstat
from agent.output.page import Block, help_text, label_value, number, with_noops

# What the program registered for a process: the (name, help) of each series and a
# wrapping's labels, per collector; None: none registered (client_golang's defaults)
Collectors = Callable[[int], Sequence[tuple[Sequence[tuple[str, str]],
                                            Sequence[tuple[str, str]]]] | None]
_KIND = {name: kind for name, _help, kind in (*procstat.SERIES, *procstat.NETWORK)}
_DEFAULT = (tuple((name, help_) for name, help_, _k in procstat.SERIES), ())
_NETWORK = {name for name, _help, _k in procstat.NETWORK}


@dataclass
class Target:
    """A target's processes now, labelled ``name``; ``collectors``: what its programs
    registered, asked per process (None: nothing to ask)."""

    name: str
    pids: list[int]
    collectors: Collectors | None = None


def blocks(targets: list[Target]) -> list[Block]:
    """The process_* families of ``targets``' processes, read now."""
    btime = _boot_time()
    families: dict[str, tuple[str, list[str], list[bytes]]] = {}
    for t in targets:
        for pid in t.pids:
            held = t.collectors(pid) if t.collectors is not None else None
            sets = [_DEFAULT] if held is None else held
            if not sets:
                continue
            values = procstat.values(pid, btime=btime, network=any(
                _base(name) in _NETWORK for series, _l in sets for name, _h in series))
            for series, labels in sets:
                mine = with_noops(labels, t.name, pid)
                text = ",".join(f'{k}="{label_value(v)}"' for k, v in mine)
                for name, help_ in series:
                    v = values.get(_base(name))
                    if v is None:
                        continue
                    f = families.setdefault(name, (help_, [], []))
                    key = f"{name}{{{text}}}"
                    f[1].append(f"{key} {number(v)}\n")
                    f[2].append(key.encode())
    return [Block(name.encode(), help_text(help_).encode(),
                  _KIND.get(_base(name), "gauge").encode(), "".join(lines).encode(), keys)
            for name, (help_, lines, keys) in sorted(families.items())]


@lru_cache(maxsize=1)
def _boot_time() -> float | None:
    return procstat.boot_time()  # read once: it does not change


def _base(name: str) -> str:
    """The series a name is of, without a Namespace's or a wrapping's prefix."""
    for base in _KIND:
        if name.endswith(base):
            return base
    return name
