"""``noop top``: a running program's series ordered by how fast they move, read from its
memory.

The truth is the program's own count: tests/programs/go/paced (and the Rust mirror
program's ``paced`` mode) moves each series at a steady pace and says, when asked,
how many updates it made and when by its own clock. The fastest series comes first and
each rate noop shows is within 10 % of the program's own count over a span that holds
noop's interval (the paces hold over any span: each series is brought every
millisecond to what its pace says). noop top is driven as a person uses it: in a real
terminal (tmux), keys sent and the screen read.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from harness.noop import REPO, command, run
from harness.programs import PROGRAMS, go_build, go_toolchain
from hypothesis import given
from hypothesis import strategies as st

from agent.output.page import Block, Bundle
from agent.top.live import View, table
from agent.top.model import Filter, Parser, Rates, Row, Series, ordered, short, sparkline

# (series on the page, what the program counts of it, updates per unit the page moves)
PACES = [("hot_total", "hot_total", 5000), ("bulk_total", "bulk_updates", 1000),
         ("warm_total", "warm_total", 500), ('requests_total{code="200"}', "requests_200", 300),
         ("latency_seconds", "latency_observations", 200),
         ('requests_total{code="500"}', "requests_500", 30)]
BULK = 100  # bulk_total moves 100 at each update
OWN = "!/^(go|process)_/"  # the program's own series, not its runtime's and process's


# --- the table, from pages -------------------------------------------------------------

def _block(name: str, kind: str, lines: list[str]) -> Block:
    text = "".join(f"{x}\n" for x in lines).encode()
    return Block(name.encode(), b"", kind.encode(), text,
                 [x.rpartition(" ")[0].encode() for x in lines])


def test_page_parsed_into_series() -> None:
    """Labels as the program has them (escapes read back, noop's target and pid apart,
    noop_pid where the program has a pid of its own), a histogram's count and sum (its
    buckets not series), a summary's (its quantiles not series)."""
    parts: list[tuple[Any, float]] = [([
        _block("c_total", "counter", ['c_total{a="x\\"y\\\\z\\n",pid="7",target="t"} 5']),
        _block("own", "gauge", ['own{noop_pid="8",noop_target="t",pid="mine"} -1.5']),
        _block("h", "histogram", ['h_bucket{le="1",pid="7",target="t"} 2',
                                  'h_bucket{le="+Inf",pid="7",target="t"} 3',
                                  'h_sum{pid="7",target="t"} 4.5',
                                  'h_count{pid="7",target="t"} 3']),
        _block("s", "summary", ['s{pid="7",quantile="0.5",target="t"} 1',
                                's_sum{pid="7",target="t"} 9', 's_count{pid="7",target="t"} 4']),
    ], 10.0)]
    p = Parser()
    r = p.reading(parts)
    got = {p.series[i].text(): (p.series[i].pid, p.series[i].kind) for i in r.present}
    assert got == {'c_total{a="x\\"y\\\\z\\n"}': (7, "counter"), 'own{pid="mine"}': (8, "gauge"),
                   "h": (7, "histogram"), "s": (7, "summary")}
    by = {p.series[i].family: i for i in r.present}
    assert p.series[by["c_total"]].labels == (("a", 'x"y\\z\n'),)
    assert r.values[by["c_total"]] == 5 and r.values[by["own"]] == -1.5
    assert (r.counts[by["h"]], r.sums[by["h"]]) == (3, 4.5)
    assert (r.counts[by["s"]], r.sums[by["s"]]) == (4, 9)


def _reading(p: Parser, at: float, text: str) -> Any:
    owned = {b"c_total": b"c_total", b"g": b"g", b"h_bucket": b"h", b"h_sum": b"h",
             b"h_count": b"h"}
    types = {b"c_total": b"counter", b"g": b"gauge", b"h": b"histogram"}
    return p.reading([(Bundle(text.encode(), types, owned, list), at)])


def test_rates_over_the_interval() -> None:
    """A counter's increase per second (a reset: its value since), a gauge's signed
    change, a histogram's observations per second and the mean of what was observed
    between the readings (a reset: of what it holds now)."""
    p = Parser()
    rates = Rates(p.series)
    first = rates.add(_reading(p, 100.0, 'c_total{pid="1"} 10\ng{pid="1"} 5\n'
                               'h_count{pid="1"} 4\nh_sum{pid="1"} 2\n'))
    assert all(r.rate is None for r in first)
    rows = {r.series.family: r for r in rates.add(_reading(
        p, 102.0, 'c_total{pid="1"} 30\ng{pid="1"} 1\nh_count{pid="1"} 8\nh_sum{pid="1"} 4\n'))}
    assert rows["c_total"].rate == 10 and rows["g"].rate == -2
    assert rows["h"].rate == 2 and rows["h"].mean == 0.5 and rows["h"].value == 8
    rows = {r.series.family: r for r in rates.add(_reading(
        p, 106.0, 'c_total{pid="1"} 4\ng{pid="1"} 1\nh_count{pid="1"} 2\nh_sum{pid="1"} 3\n'))}
    assert rows["c_total"].rate == 1 and rows["g"].rate == 0
    assert rows["h"].rate == 0.5 and rows["h"].mean == 1.5
    assert [round(x, 3) for x in rows["c_total"].trend(106.0)] == [10, 1]


@given(st.lists(st.tuples(st.floats(0.01, 10), st.integers(0, 10**12)), min_size=2,
                max_size=12))
def test_counter_rates_any_steps(steps: list[tuple[float, int]]) -> None:
    """Whatever the steps and intervals: each rate is the increase over the interval
    (from zero after a reset), and the trend keeps the last minute's."""
    p = Parser()
    rates = Rates(p.series)
    at, was = 0.0, None
    for dt, value in steps:
        at += dt
        (row,) = rates.add(_reading(p, at, f'c_total{{pid="3"}} {value}\n'))
        if was is None:
            assert row.rate is None
        else:
            want = (value - was if value >= was else value) / dt
            assert row.rate is not None and math.isclose(row.rate, want, rel_tol=1e-9)
        was = value
    assert len(row.trend(at)) <= len(steps) - 1


def _rows() -> list[Row]:
    s = [Series("a_total", "counter", 1, (("k", "x"),)), Series("a_total", "counter", 1,
                                                                (("k", "y"),)),
         Series("b", "gauge", 2, ()), Series("h", "histogram", 1, ())]
    return [Row(s[0], 10, 5.0), Row(s[1], 20, 1.0), Row(s[2], 3, -7.0),
            Row(s[3], 4, 2.0, 0.25)]


def test_order_filter_fold() -> None:
    rows = _rows()
    assert [r.name() for r in ordered(rows)] == ["b", 'a_total{k="x"}', "h", 'a_total{k="y"}']
    assert ordered(rows, reverse=True)[0].name() == 'a_total{k="y"}'
    assert [r.series.family for r in ordered(rows, "value")][:2] == ["a_total", "a_total"]
    assert [r.series.pid for r in ordered(rows, "pid")] == [1, 1, 1, 2]
    assert [r.name() for r in rows if Filter("a_*").wants(r.series)] == \
        ['a_total{k="x"}', 'a_total{k="y"}']
    assert [r.name() for r in rows if Filter('*k="y"*').wants(r.series)] == ['a_total{k="y"}']
    assert [r.name() for r in rows if Filter("/^(b|h)$/").wants(r.series)] == ["b", "h"]
    assert [r.name() for r in rows if Filter("!/^(b|h)$/").wants(r.series)] == \
        ['a_total{k="x"}', 'a_total{k="y"}']
    assert [r.name() for r in rows if Filter("!a_*").wants(r.series)] == ["b", "h"]
    with pytest.raises(ValueError, match="not a regular expression"):
        Filter("/[/")
    folded = Rates([]).folded(rows, {"a_total"})
    a = next(r for r in folded if r.folded)
    assert (a.name(), a.value, a.rate) == ("a_total (2 series)", 30, 6.0)
    v = View(fold=True)
    assert len(v.rows(Rates([]), rows)) == 3
    v.toggled = {"a_total"}  # opened again
    assert len(v.rows(Rates([]), rows)) == 4


def test_numbers_and_trends_fit() -> None:
    assert [short(x) for x in (None, 0, 5, 4999.6, 12345, 1.5e6, 2.5e-5, math.nan, math.inf,
                               -3e9)] == ["-", "0", "5", "4999.6", "12.3k", "1.50M",
                                          "2.50e-05", "NaN", "+Inf", "-3.00G"]
    assert all(len(short(10.0 ** e * 1.234567)) <= 9 for e in range(-12, 20))
    assert sparkline([0, 1, 2, 4], 10) == "▁▃▅█"
    assert len(sparkline([float(i) for i in range(60)], 15)) == 15
    assert sparkline([0.0, 0.0], 5) == "▁▁"


def test_table_says_what_hot_means() -> None:
    text = table(_rows(), False, 2.0)
    assert "not how often it is updated" in text.splitlines()[0]
    assert text.splitlines()[1].split() == ["RATE/s", "VALUE", "MEAN", "KIND", "PID", "SERIES"]


# --- the command, on running programs --------------------------------------------------

@pytest.fixture(scope="module", params=[("1.19", ()), ("newest", ("-ldflags=-s -w",))],
                ids=["go1.19", "go-newest-stripped"])
def go_paced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    version, flags = request.param
    return go_build(go_toolchain(version), tmp_path_factory.mktemp("paced") / "paced", None,
                    PROGRAMS / "go" / "paced", flags)


@pytest.fixture(scope="module")
def go_paced_119(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return go_build(go_toolchain("1.19"), tmp_path_factory.mktemp("paced") / "paced", None,
                    PROGRAMS / "go" / "paced")


class Paced:
    """A paced program running: its pid, and its own counts when asked."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        self.pid = int(self.proc.stdout.readline())
        self.proc.stdout.readline()  # its /metrics address

    def counts(self) -> dict[str, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _check_rates(shown: dict[str, dict[str, Any]], before: dict[str, float],
                 after: dict[str, float], updates: bool = False) -> None:
    """Every paced series' rate within 10 % of the program's own over the span."""
    span = after["seconds"] - before["seconds"]
    for page, counted, _pace in PACES:
        own = (after[counted] - before[counted]) / span * (BULK if counted == "bulk_updates"
                                                           else 1)
        got = shown[page]["rate"]
        assert got == pytest.approx(own, rel=0.10), (page, got, own)
        if updates:  # what the probes counted: bulk_total's updates are a hundredth
            # (ten a second: over noop's 2 s interval two updates more or less are 10 %,
            # which a loaded host's scheduling gives the paced loop; 15 % here)
            moves = (after[counted] - before[counted]) / span
            assert shown[page]["updates_rate"] == pytest.approx(moves, rel=0.15), page


def _series(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for s in obj["series"]:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s["labels"].items()))
        out[s["family"] + (f"{{{labels}}}" if labels else "")] = s
    return out


def _once(binary: Path, pid: int, *flags: str) -> tuple[dict[str, Any], str]:
    r = run("top", "--binary", binary, "--pid", str(pid), "--once", "--json", "-d", "2",
            *flags)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def _order_and_rates(binary: Path, p: Paced, *flags: str) -> dict[str, Any]:
    before = p.counts()
    obj, _err = _once(binary, p.pid, *flags)
    after = p.counts()
    shown = _series(obj)
    names = [n for n in (s["family"] + ("{" + ",".join(f'{k}="{v}"' for k, v in
                                                       sorted(s["labels"].items())) + "}"
                                        if s["labels"] else "") for s in obj["series"])]
    own = [n for n in names if not n.startswith(("go_", "process_"))]
    assert own[0] == "hot_total"  # the fastest of the program's own first (its memory's
    # gauges move in bytes: hundreds of thousands a second while the heap grows)
    paced_names = [page for page, _c, _p in PACES]
    assert [n for n in names if n in paced_names][:3] == paced_names[:3]
    _check_rates(shown, before, after, updates="--probes" in flags)
    assert shown["latency_seconds"]["mean"] == pytest.approx(0.25)  # every observation
    assert shown["level"]["rate"] == pytest.approx(200, rel=0.10)  # a gauge's change/s
    assert shown["idle_total"]["rate"] == 0 and shown["idle_total"]["value"] == 7
    assert obj["processes"] == [p.pid]
    # every collector read, nothing damaged; not scraped: a local registry would not show
    assert [n for n in obj["unseen"] if "not scraped yet" not in n] == [], obj["unseen"]
    return shown


def test_go_rates_are_the_programs(privileged: None, go_paced: Path) -> None:
    """Go (DWARF, and the newest Go stripped): the order and every rate as the program
    counted; its runtime's and process's series beside them."""
    p = Paced([str(go_paced)])
    try:
        time.sleep(0.5)
        shown = _order_and_rates(go_paced, p)
        assert "go_goroutines" in shown and "process_cpu_seconds_total" in shown
        assert shown["go_goroutines"]["kind"] == "gauge"
    finally:
        p.stop()


def test_rust_rates_are_the_programs(privileged: None, rust_mirror: Path) -> None:
    p = Paced([str(rust_mirror), "paced"])
    try:
        time.sleep(0.5)
        shown = _order_and_rates(rust_mirror, p)
        assert "process_cpu_seconds_total" in shown
    finally:
        p.stop()


def test_a_registry_only_a_local_holds(privileged: None, rust_mirror: Path) -> None:
    """A registry only main's local holds (the Rust mirror program's "full" mode) shows
    once the program serves its /metrics twice, found by the Gather probe; until then
    the status says it may be missing."""
    import threading
    import urllib.request

    prog = subprocess.Popen([str(rust_mirror), "full"], stdout=subprocess.PIPE, text=True)
    try:
        assert prog.stdout is not None
        url = "http://" + prog.stdout.readline().split()[1] + "/metrics"
        obj, _err = _once(rust_mirror, prog.pid)
        assert not any(s["family"].startswith("local_") for s in obj["series"])
        assert any("not scraped yet" in n for n in obj["unseen"]), obj["unseen"]
        done = threading.Event()

        def scrape() -> None:  # as Prometheus would, while noop top runs
            while not done.wait(1.1):
                with urllib.request.urlopen(url, timeout=10) as r:
                    r.read()

        scraper = threading.Thread(target=scrape)
        scraper.start()
        try:
            obj, _err = _once(rust_mirror, prog.pid, "-d", "5")
        finally:
            done.set()
            scraper.join()
        families = {s["family"] for s in obj["series"]}
        assert {"local_calls_total", "local_reset", "local_again_total"} <= families
        assert not any("not scraped yet" in n for n in obj["unseen"]), obj["unseen"]
    finally:
        prog.kill()
        prog.wait()


@pytest.mark.serial  # two rates over windows of the machine's timing: alone
def test_probes_count_updates_apart_from_moves(privileged: None, go_paced_119: Path) -> None:
    """--probes: each series' updates per second as the probes counted them, beside how
    fast it moves: bulk_total moves 100 at each of its updates; the probes' cost said."""
    go_paced = go_paced_119
    p = Paced([str(go_paced)])
    try:
        time.sleep(0.5)
        before = p.counts()
        obj, err = _once(go_paced, p.pid, "--probes")
        after = p.counts()
        shown = _series(obj)
        _check_rates(shown, before, after, updates=True)
        bulk = shown["bulk_total"]
        assert bulk["rate"] == pytest.approx(BULK * bulk["updates_rate"], rel=0.15)
        assert any(n.startswith("update probes:") for n in obj["unseen"]), obj["unseen"]
        assert "update probes:" in err
    finally:
        p.stop()


# --- in a terminal ---------------------------------------------------------------------

class Terminal:
    """A shell in a tmux session of its own server: keys sent, the screen read."""

    def __init__(self, tmp: Path, width: int = 200, height: int = 40) -> None:
        tmux = shutil.which("tmux")
        assert tmux, "tmux not found: run ./setup.sh"
        self.base = [tmux, "-S", str(tmp / "tmux.sock")]
        env = {"NOOP_CACHE_DIR": os.environ.get("NOOP_CACHE_DIR", ""), "PS1": "$ ",
               "TERM": "xterm-256color", "LANG": "C.UTF-8"}
        self.tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                  *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
                  "bash --norc --noprofile")

    def tmux(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], check=True, capture_output=True,
                              text=True, timeout=30).stdout

    def type(self, text: str, enter: bool = True) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)
        if enter:
            self.tmux("send-keys", "-t", "t", "Enter")

    def key(self, name: str) -> None:
        self.tmux("send-keys", "-t", "t", name)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-t", "t", "-p")

    def until(self, what: str, timeout: float = 60) -> str:
        """The screen, once ``what`` (a regex) is on it."""
        end = time.monotonic() + timeout
        while True:
            got = self.screen()
            if re.search(what, got, re.M):
                return got
            assert time.monotonic() < end, f"{what!r} not on the screen:\n{got}"
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, check=False)


def _rows_on(screen: str) -> list[tuple[float | None, str]]:
    """The table's rows on the screen: (rate, series)."""
    out: list[tuple[float | None, str]] = []
    lines = screen.splitlines()
    head = next(i for i, line in enumerate(lines) if "RATE/s" in line)
    for line in lines[head + 1:]:
        m = re.match(r"\s*(\S+)\s+\S+\s+\S+\s+(counter|gauge|histogram|summary|untyped)\s+"
                     r"\d*\s+\S*\s+(\S.*?)\s*$", line)
        if m is None:
            break
        rate = m.group(1)
        scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(rate[-1], 1.0)
        number = rate.rstrip("kMG")
        out.append((float(number) * scale if number != "-" else None, m.group(3)))
    return out


def test_full_screen_as_a_person_uses_it(privileged: None, go_paced_119: Path,
                                         tmp_path: Path) -> None:
    """In a real terminal: noop top waits for the program, follows it once it starts,
    shows the fastest series first at the program's own rate, hides the rest behind a
    filter, folds a family, says when the program is gone, and quits with the terminal
    as it was."""
    binary = tmp_path / "paced"
    shutil.copy(go_paced_119, binary)
    term = Terminal(tmp_path)
    p: Paced | None = None
    try:
        noop = " ".join(f"'{a}'" for a in command("top", "--binary", binary, "--filter",
                                                  OWN))
        term.type(f"cd '{REPO}'; S1=$(stty -g); {noop}; echo \"EXITED $? "
                  "$([ \"$S1\" = \"$(stty -g)\" ] && echo SAME || echo CHANGED)\"")
        term.until(r"no process runs paced now: waiting")
        p = Paced([str(binary)])
        term.until(r"^\s*[\d.]+k?\s+\S+\s+\S+\s+counter\s+\d+\s+\S*\s+hot_total")
        before = p.counts()
        time.sleep(3)
        screen = term.screen()
        after = p.counts()
        rows = _rows_on(screen)
        assert rows[0][1] == "hot_total", screen
        own = (after["hot_total"] - before["hot_total"]) / (after["seconds"] - before["seconds"])
        assert rows[0][0] == pytest.approx(own, rel=0.10), screen
        assert "1 process" in screen and "not how often it is updated" in screen

        term.key("/")
        term.type("requests*")
        screen = term.until(r"filter requests\*")
        time.sleep(1.5)
        shown = [name for _rate, name in _rows_on(term.screen())]
        assert shown == ['requests_total{code="200"}', 'requests_total{code="500"}'], shown

        term.key("f")
        screen = term.until(r"requests_total \(2 series\)")
        ((rate, _name),) = _rows_on(screen)
        assert rate == pytest.approx(330, rel=0.10), screen

        term.key("Escape")
        term.key("s")  # sorted by value now: the marker moves
        screen = term.until(r"RATE/s\s+▼VALUE")
        p.stop()
        term.until(r"no process runs paced now")
        term.key("q")
        screen = term.until(r"EXITED \d+ \w+")
        assert "EXITED 0 SAME" in screen, screen
        assert "RATE/s" not in screen  # the full screen gone, the shell's as it was
    finally:
        if p is not None:
            p.stop()
        term.close()


def test_not_a_terminal_prints_one_interval(privileged: None, go_paced_119: Path) -> None:
    """Without a terminal noop top does what --once does: one interval's table."""
    p = Paced([str(go_paced_119)])
    try:
        time.sleep(0.5)
        r = run("top", "--binary", go_paced_119, "--pid", str(p.pid), "-n", "3",
                "--filter", OWN)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("# over ") and "not how often" in lines[0]
        assert lines[2].split()[-1] == "hot_total" and len(lines) == 5
        # what it cannot show, on stderr: only that a local registry would not be seen
        (said,) = r.stderr.splitlines()
        assert said.startswith("noop: 1 process not scraped yet"), r.stderr
    finally:
        p.stop()


def test_spec_targets_side_by_side(privileged: None, go_paced_119: Path, rust_mirror: Path,
                                   tmp_path: Path) -> None:
    """--config: every target of the spec, each program's own series."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"version: 1\ntargets:\n  go:\n    binary: {go_paced_119}\n"
                    f"  rust:\n    binary: {rust_mirror}\nprobes:\n"
                    "  - name: start\n    target: go\n    function: main.main\n")
    go, rust = Paced([str(go_paced_119)]), Paced([str(rust_mirror), "paced"])
    try:
        time.sleep(0.5)
        r = run("top", "--config", spec, "--once", "--json", "--filter", "hot_total")
        assert r.returncode == 0, r.stderr
        obj = json.loads(r.stdout)
        assert sorted(s["pid"] for s in obj["series"]) == sorted([go.pid, rust.pid])
        assert all(s["rate"] == pytest.approx(5000, rel=0.10) for s in obj["series"])
    finally:
        go.stop()
        rust.stop()


def test_mistakes_are_one_line(privileged: None, go_paced_119: Path, c_layouts: Path) -> None:
    """Nothing named, a regex that does not compile, no such process, a C program, one
    interval of a program nothing runs, and no right to read another process's memory:
    one line each, nothing loaded."""
    capsh = shutil.which("capsh")
    assert capsh, "capsh not found: run ./setup.sh"
    cases = [((), 2, "nothing to show"),
             (("--binary", str(go_paced_119), "--filter", "/[/"), 2, "not a regular"),
             (("--pid", "4194304"), 2, "no process 4194304"),
             (("--binary", str(c_layouts)), 2, "neither a Go nor a Rust program"),
             (("--binary", str(go_paced_119), "--once"), 1, "no process runs paced")]
    for args, code, said in cases:
        r = run("top", *args)
        assert r.returncode == code and said in r.stderr, (args, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    r = subprocess.run([capsh, "--drop=cap_sys_ptrace", "--", "-c", " ".join(
        f"'{a}'" for a in command("top", "--binary", go_paced_119, "--once"))], cwd=REPO,
        capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1 and "CAP_SYS_PTRACE" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1
