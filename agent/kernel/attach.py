"""Attach: how uprobes go on in this process (uprobe_multi links, or perf-event
uprobes one at a time), putting a program's uprobes on a file whose code its proofs
check, and taking them off again; and what the kernel refuses, in one line."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

from agent.binary import debuginfo
from agent.binary.proof import Codes, Opened, Proof
from agent.errors import NoopError
from agent.kernel import uprobes


class LoadError(NoopError):
    """The kernel or BCC refused: no privileges, no headers, no uprobes."""


class BuildChanged(LoadError):
    """A file is not what its plan was made from: another build is at its path now
    (``changed``), or the plan does not hold for it (a damaged cache entry, say).
    Either way the answer is to resolve it again, trusting nothing kept about it."""

    def __init__(self, path: str, why: str, changed: bool) -> None:
        super().__init__((f"the build changed under noop: {path}: {why}" if changed else
                          f"{path}: the plan does not hold for this file: {why}"),
                         "noop resolves the file that is there now")
        self.path = path
        self.changed = changed

    def distrust(self) -> None:
        """Forget what noop kept about the file now at the path: a plan did not hold
        for it, and planning again must not read the same answers back (a new build
        has nothing kept yet, so forgetting costs nothing then)."""
        debuginfo.forget(self.path)


def has_links() -> bool:
    """Whether this kernel has uprobe_multi links at all (its BTF lists the function
    that makes them): for naming what a process refused every program lacks."""
    from agent.kernel import kfeatures

    facts = kfeatures.vmlinux_btf()
    return facts is None or "bpf_uprobe_multi_link_attach" in facts.funcs


@dataclass(frozen=True, slots=True)
class Kind:
    """How uprobes go on in this process: ``multi`` uprobe_multi links (one per program
    and file; no CAP_SYS_ADMIN; off at once), else perf-event uprobes (one each);
    ``pid_filter`` whether a link's pid covers every thread of the process; ``why``:
    said by the log and ``noop doctor``."""

    multi: bool
    pid_filter: bool
    why: str
    denied: bool = False  # no BPF program loads for this process (its capabilities)

    @property
    def name(self) -> str:
        return "uprobe_multi links" if self.multi else "perf-event uprobes"


ATTACH_ENV = "NOOP_ATTACH"  # auto (the default), perf or multi: which way, forced


@cache
def attach_kind() -> Kind:
    """uprobe_multi links where this kernel makes them for this process (tried, not
    inferred from its version), else perf-event uprobes; ``NOOP_ATTACH`` forces one."""
    forced = os.environ.get(ATTACH_ENV, "auto").strip().lower() or "auto"
    if forced not in ("auto", "perf", "multi"):
        raise LoadError(f"{ATTACH_ENV}={forced!r}: expected auto, perf or multi",
                        f"unset {ATTACH_ENV} to let noop choose")
    if forced == "perf":
        return Kind(False, False, f"{ATTACH_ENV}=perf")
    support = uprobes.uprobe_multi()
    if support.links:
        return Kind(True, support.pid_filter,
                    "this kernel makes uprobe_multi links" + (
                        "" if support.pid_filter else
                        " (its pid filter follows one thread only: noop filters instead)"))
    if forced == "multi":
        raise LoadError(f"{ATTACH_ENV}=multi, but {support.why}",
                        f"unset {ATTACH_ENV}: noop then uses perf-event uprobes")
    return Kind(False, False, support.why, support.denied)


@contextmanager
def attaching(way: str) -> Iterator[None]:
    """Within it, uprobes go on ``way`` (auto, perf or multi) in this process and the
    noops it starts, as NOOP_ATTACH would have it (``attach_kind`` asks again): both
    ways compared in one run (``noop bench``), a test session's way."""
    old = os.environ.get(ATTACH_ENV)
    os.environ[ATTACH_ENV] = way
    attach_kind.cache_clear()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ATTACH_ENV, None)
        else:
            os.environ[ATTACH_ENV] = old
        attach_kind.cache_clear()


@dataclass(frozen=True, slots=True)
class Uprobe:
    """A uprobe to put on: file ``offset`` and its ``proof``, the program, what it is
    (for errors) and its cookie."""

    offset: int
    proof: Proof | None
    prog: int
    what: str
    cookie: int | None = None
    group: int = 0  # uprobes of one group and program share a link (a probe's sites)
    pid: int = 0  # only this process runs it (where a link can filter); 0: every one


Handle = uprobes.Probe | uprobes.MultiLink  # what takes a uprobe off when closed


def attach_proven(path: str, opened: Opened, wanted: list[Uprobe]) -> list[Handle]:
    """``wanted`` on the file ``opened`` at ``path``: each offset proven an instruction
    boundary of the build its plan was made from, through the open file, before any
    goes on; attached through that descriptor (``attach_kind``: one link per group and
    program, or a perf-event uprobe each); then the code read again, in case the file
    was written meanwhile. All of them, or none (BuildChanged, or the kernel's
    refusal). One handle per uprobe, in order (a link's for each of its sites)."""
    codes: Codes = {}  # a function's code read and hashed once for all its sites
    for u in wanted:
        why = opened.check(u.proof, u.offset, codes)
        if why:
            changed = u.proof is not None and bool(u.proof.build) and \
                opened.build() != u.proof.build
            raise BuildChanged(path, f"{u.what}: {why}", changed)
    kind = attach_kind()

    def link_of(u: Uprobe) -> tuple[int, int, int]:
        return u.group, u.prog, u.pid if kind.pid_filter else 0

    made: list[Handle] = []  # every one, to take off again if any fails
    try:
        if kind.multi:
            groups: dict[tuple[int, int, int], list[Uprobe]] = {}
            for u in wanted:
                groups.setdefault(link_of(u), []).append(u)
            links: dict[tuple[int, int, int], Handle] = {}
            for key, us in groups.items():
                links[key] = attach_many(opened.path, us, key[2])
                made.append(links[key])
            out = [links[link_of(u)] for u in wanted]
        else:
            for u in wanted:
                made.append(attach_at(opened.path, u.offset, u.prog, u.what, u.cookie))
            out = list(made)
        why = opened.unchanged([u.proof for u in wanted if u.proof is not None])
        if why:
            raise BuildChanged(path, why, True)
    except BaseException:
        take_off(made)
        raise
    return out


def take_off(handles: list[Handle]) -> None:
    """Close every handle once (a link appears once per site it holds), side by side:
    the kernel waits for a grace period as each comes off (about 50 ms a link, 100 ms a
    perf-event uprobe), and those waits overlap (21 links: 0.98 s one by one, 0.17 s
    so)."""
    unique = list({id(h): h for h in handles}.values())
    if len(unique) < 2:
        for h in unique:
            h.close()
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(32, len(unique)), thread_name_prefix="noop-detach") as pool:
        for _ in pool.map(lambda h: h.close(), unique):
            pass


def attach_many(path: str, wanted: list[Uprobe], pid: int) -> uprobes.MultiLink:
    """One uprobe_multi link of ``wanted`` (one program's), on the file at ``path``.
    When the kernel refuses it, each is tried alone to say which one, and why."""
    prog = wanted[0].prog
    try:
        return uprobes.MultiLink(path, [u.offset for u in wanted], prog,
                                [u.cookie or 0 for u in wanted], pid)
    except OSError as exc:
        first = exc
    for u in wanted:
        try:
            uprobes.MultiLink(path, [u.offset], prog, [u.cookie or 0], pid).close()
        except OSError as exc:
            raise _refused(u.what, exc) from None
    raise _refused(f"{len(wanted)} uprobes ({wanted[0].what}, ...)", first)


def _refused(what: str, exc: OSError) -> LoadError:
    hint = ("the kernel will not probe the instruction there (x86 refuses "
            "LOCK-prefixed ones); probe another function" if exc.errno == 524
            else "the file is gone; is the target still installed?"
            if exc.errno == errno.ENOENT
            else "run 'noop doctor' to check uprobe support")
    return LoadError(f"cannot attach {what}: {exc.strerror or exc}", hint)


def attach_at(binary: str, offset: int, prog: int, what: str, cookie: int | None = None
              ) -> uprobes.Probe:
    """A uprobe running ``prog`` at file ``offset`` of ``binary`` in every process (with
    ``cookie`` for the program to read)."""
    try:
        return uprobes.Probe(binary, offset, prog, cookie)
    except OSError as exc:
        raise _refused(what, exc) from None
