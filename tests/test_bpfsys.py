"""uprobe_multi links made through noop's own bpf() calls, on a copy of /bin/true that
nothing runs: a link holds every offset it was given, a link the kernel refuses is
tried site by site to name the site refused, and closing a link leaves none.
Privileged: real BPF."""

from __future__ import annotations

import errno
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.kernel import attach, bpfsys, uprobes

RETURN_0 = bytes.fromhex("b700000000000000" "9500000000000000")  # r0 = 0; exit


@pytest.fixture
def program(privileged: None) -> Iterator[int]:
    if not uprobes.uprobe_multi().links:
        pytest.fail(f"this kernel makes no uprobe_multi links: {uprobes.uprobe_multi().why}",
                    pytrace=False)
    fd = bpfsys.load_program("noop_test", RETURN_0, "GPL", 0, bpfsys.ATTACH_UPROBE_MULTI)
    yield fd
    os.close(fd)


def _links(path: Path) -> list[uprobes.LinkOnFile]:
    mine = os.path.realpath(path)
    return [x for x in uprobes.uprobe_multi_links() if os.path.realpath(x.path) == mine]


def _uprobes(prog: int, offsets: list[int]) -> list[attach.Uprobe]:
    return [attach.Uprobe(o, None, prog, f"site {i} at {o:#x}", cookie=i)
            for i, o in enumerate(offsets)]


def test_one_link_holds_every_site_and_goes(program: int, tmp_path: Path) -> None:
    true = Path(shutil.copy("/bin/true", tmp_path / "true"))
    offsets = [0x1000 + 16 * i for i in range(40)]
    link = attach.attach_many(str(true), _uprobes(program, offsets), 0)
    try:
        (held,) = _links(true)
        assert (held.count, held.pid) == (len(offsets), 0)
    finally:
        link.close()
    assert _links(true) == []


def test_a_refused_link_names_the_site_the_kernel_refuses(program: int,
                                                          tmp_path: Path) -> None:
    """One offset past the end of the file among good ones: the kernel refuses the whole
    link (EINVAL); noop tries each site alone and names the one refused, with the
    kernel's reason, and leaves nothing attached."""
    true = Path(shutil.copy("/bin/true", tmp_path / "true"))
    past = true.stat().st_size + 0x1000
    offsets = [0x1000, 0x1010, past, 0x1020]
    with pytest.raises(attach.LoadError) as refused:
        attach.attach_many(str(true), _uprobes(program, offsets), 0)
    assert refused.value.args[0] == (f"cannot attach site 2 at {past:#x}: "
                                     f"{os.strerror(errno.EINVAL)}")
    assert _links(true) == []
    # Every site alone is fine, and the whole link is refused: said as the whole.
    with pytest.raises(OSError) as whole:
        uprobes.MultiLink(str(true), [0x1000, past], program, [0, 0], 0)
    assert whole.value.errno == errno.EINVAL


def test_take_reads_and_deletes_a_per_cpu_row_at_once(privileged: None) -> None:
    """A row the prune sweep retires is read and deleted in one system call (no hit
    lands between the two): every CPU's copy comes back, and the key is gone."""
    table = bpfsys.Map(bpfsys.MapDef("noop_test_take", 5, 8, 16, 4, 0))  # percpu hash
    try:
        key, row = (7).to_bytes(8, "little"), bytes(range(16))
        table.update(key, row)
        got = table.take(key)
        assert got == [row] * bpfsys.possible_cpus()
        assert table.lookup(key) is None
        assert table.take(key) == []  # absent: nothing, no error
    finally:
        table.close()


def test_a_refused_program_says_the_kernel_reason_and_the_verifier_words(
        privileged: None) -> None:
    exit_only = bytes.fromhex("9500000000000000")  # exit with r0 never set
    with pytest.raises(bpfsys.BpfError) as got:
        bpfsys.load_program("noop_bad", exit_only, "GPL", 0)
    assert got.value.message.startswith(
        f"the kernel refused program noop_bad: {os.strerror(errno.EACCES)}; ")
    assert "R0 !read_ok" in got.value.message


def test_a_load_a_signal_interrupts_is_tried_again(privileged: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The verifier stops for a pending signal (EAGAIN): a SIGHUP or SIGCHLD arriving
    while noop loads must not make the kernel look as if it refused the program. A
    program of 400,000 instructions takes the verifier ~0.2 s here; a timer fires once
    10 ms into it."""
    seen: list[int] = []
    call = bpfsys.bpf_call

    def watched(cmd: int, attr: Any) -> int:
        try:
            return call(cmd, attr)
        except OSError as exc:
            seen.append(exc.errno or 0)
            raise

    monkeypatch.setattr(bpfsys, "bpf_call", watched)
    rang: list[int] = []
    old = signal.signal(signal.SIGALRM, lambda *_: rang.append(1))
    insns = bytes.fromhex("b700000000000000") * 400_000 + bytes.fromhex("9500000000000000")
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        fd = bpfsys.load_program("noop_long", insns, "GPL", 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    os.close(fd)
    assert rang == [1]
    assert seen == [errno.EAGAIN]  # the first load was cut short; the second went in
