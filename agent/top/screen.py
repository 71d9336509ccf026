"""``noop top`` full screen, through the standard library's ``curses``: the table of
series, hottest first, refreshed every interval; keys to sort, reverse, filter, fold or
open a family, pause, move and quit. noop's own lines are held while the screen is up
(the status line shows the last warning) and printed when it goes; what the C library
writes on stderr meanwhile (BCC's) is printed then too.
"""

from __future__ import annotations

import contextlib
import curses
import locale
import os
import sys
import tempfile
import time
from collections.abc import Iterator

from agent import logs
from agent.output.loop import Loop
from agent.top.live import Top
from agent.top.model import ASCII_BARS, BARS, COLUMNS, Filter, Key, Row, short, sparkline

TREND = 15  # characters of the trend: the last minute
_ENTER = (10, 13, curses.KEY_ENTER)
_BACK = (8, 127, curses.KEY_BACKSPACE)
_ESC = 27
NOTE = ("hot = how fast a value moves (counters: increase/s; gauges: change/s; histograms "
        "and summaries: observations/s and their mean), not how often it is updated")
KEYS = ("q quit  p pause  s sort  r reverse  f fold all  enter fold/open family  "
        "/ filter  esc clear  arrows move")


@contextlib.contextmanager
def _held() -> Iterator[list[tuple[str, int]]]:
    """noop's lines held (not INFO's) and fd 2 sent to a file while the screen is up;
    both written out after."""
    held: list[tuple[str, int]] = []
    logs.sink = lambda line, priority: held.append((line, priority)) \
        if priority != logs.INFO else None
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as spool:
        os.dup2(spool.fileno(), 2)
        try:
            yield held
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            logs.sink = None
            spool.seek(0)
            written = spool.read().decode("utf-8", "replace")
            if written:
                sys.stderr.write(written)
            for line, priority in held:
                logs.say(line, priority)


def run(top: Top, loop: Loop) -> int:
    """The screen, until ``q`` or a signal."""
    with contextlib.suppress(locale.Error):
        locale.setlocale(locale.LC_ALL, "")
    with _held() as held:
        return int(curses.wrapper(lambda scr: _Screen(scr, top, loop, held).run()))


class _Screen:
    def __init__(self, scr: curses.window, top: Top, loop: Loop,
                 held: list[tuple[str, int]]) -> None:
        self.scr, self.top, self.loop, self.held = scr, top, loop, held
        self.view = top.view
        utf8 = "utf" in (locale.getpreferredencoding(False) or "").lower()
        self.bars = BARS if utf8 else ASCII_BARS
        self.mark = ("▼", "▲") if utf8 else ("v", "^")
        self.paused = False
        self.prompt: str | None = None  # the filter being typed
        self.message = ""  # said for a while (a filter that does not compile)
        self.message_until = 0.0
        self.shown: list[Row] = []
        self.selected: Key | str | None = None  # the row under the cursor (a family: str)
        self.cursor = 0
        self.top_row = 0
        self.notes: list[str] = []
        self.due = 0.0

    def run(self) -> int:
        with contextlib.suppress(curses.error):
            curses.curs_set(0)
        self.scr.nodelay(True)
        self.scr.keypad(True)
        chores = self.top.chores()
        now = time.monotonic()
        for c in chores:
            c.due = now + c.seconds
        while True:
            if self.loop.caught:
                return 0
            while (ch := self.scr.getch()) != -1:
                if self._key(ch):
                    return 0
                self._draw()
            if not self.paused and time.monotonic() >= self.due:
                self._refresh()
                self._draw()
            self.top.drain()
            self.top._wait(0.05)
            for c in chores:
                if time.monotonic() >= c.due:
                    c.do()
                    c.due = time.monotonic() + c.seconds

    def _refresh(self) -> None:
        self.top.refresh()
        self.due = time.monotonic() + self.view.delay
        self.notes = self.top.unseen()
        self._order()

    def _order(self) -> None:
        self.shown = self.view.rows(self.top.rates, self.top.rows)
        if self.selected is not None:
            for i, r in enumerate(self.shown):
                if self._id(r) == self.selected:
                    self.cursor = i
                    break
        self.cursor = max(0, min(self.cursor, len(self.shown) - 1))

    @staticmethod
    def _id(r: Row) -> Key | str:
        return r.series.family if r.folded else r.series.key

    def _key(self, ch: int) -> bool:
        """Answer a key; True: quit."""
        if self.prompt is not None:
            self._typed(ch)
            return False
        if ch in (ord("q"), ord("Q")):
            return True
        if ch in (ord("p"), ord(" ")):
            self.paused = not self.paused
        elif ch == ord("s"):
            columns = [c for c in COLUMNS if c != "updates" or self.view.probes]
            self.view.sort = columns[(columns.index(self.view.sort) + 1) % len(columns)] \
                if self.view.sort in columns else columns[0]
            self._order()
        elif ch == ord("r"):
            self.view.reverse = not self.view.reverse
            self._order()
        elif ch == ord("f"):
            self.view.fold = not self.view.fold
            self.view.toggled.clear()
            self._order()
        elif ch in _ENTER or ch == ord("o"):
            if self.shown:
                family = self.shown[self.cursor].series.family
                self.view.toggled ^= {family}
                self.selected = None
                self._order()
                for i, r in enumerate(self.shown):
                    if r.series.family == family:
                        self.cursor = i
                        break
        elif ch == ord("/"):
            self.prompt = ""
        elif ch == _ESC:
            self.view.filter = Filter()
            self._order()
        elif ch == curses.KEY_RESIZE:
            pass
        else:
            self._move(ch)
        if self.shown and ch not in _ENTER:
            self.selected = self._id(self.shown[self.cursor])
        return False

    def _move(self, ch: int) -> None:
        page = max(1, self._rows_room())
        step = {curses.KEY_UP: -1, ord("k"): -1, curses.KEY_DOWN: 1, ord("j"): 1,
                curses.KEY_PPAGE: -page, curses.KEY_NPAGE: page,
                curses.KEY_HOME: -len(self.shown), ord("g"): -len(self.shown),
                curses.KEY_END: len(self.shown), ord("G"): len(self.shown)}.get(ch)
        if step is not None:
            self.cursor = max(0, min(len(self.shown) - 1, self.cursor + step))

    def _typed(self, ch: int) -> None:
        assert self.prompt is not None
        if ch in _ENTER:
            try:
                self.view.filter = Filter(self.prompt)
            except ValueError as exc:
                self._say(str(exc))
            self.prompt = None
            self.cursor = 0
            self._order()
        elif ch == _ESC:
            self.prompt = None
        elif ch in _BACK:
            self.prompt = self.prompt[:-1]
        elif 32 <= ch < 0x110000 and ch not in (curses.KEY_RESIZE,) and ch < curses.KEY_MIN:
            self.prompt += chr(ch)

    def _say(self, text: str) -> None:
        self.message, self.message_until = text, time.monotonic() + 5

    def _status(self) -> list[str]:
        lines = list(self.notes)
        warned = [line for line, priority in self.held if priority != logs.INFO]
        if warned:
            lines.append(warned[-1])
        if self.message and time.monotonic() < self.message_until:
            lines.insert(0, self.message)
        return lines[:3]

    def _rows_room(self) -> int:
        h, _w = self.scr.getmaxyx()
        return h - 4 - len(self._status())

    def _put(self, y: int, text: str, attr: int = 0) -> None:
        h, w = self.scr.getmaxyx()
        if 0 <= y < h and w > 1:
            with contextlib.suppress(curses.error):
                self.scr.addnstr(y, 0, text.ljust(w - 1), w - 1, attr)

    def _draw(self) -> None:
        scr, top, view = self.scr, self.top, self.view
        scr.erase()
        h, _w = scr.getmaxyx()
        n = len(top.pids)
        title = (f" noop top  {top.named}  {n} process{'es' * (n != 1)}  {top.series} series"
                 f"  every {view.delay:g}s  {top.cpu * 1000:.0f} ms CPU a refresh")
        if view.filter:
            title += f"  filter {view.filter.text}"
        if self.paused:
            title += "  PAUSED"
        self._put(0, title, curses.A_REVERSE)
        self._put(1, " " + NOTE, curses.A_DIM)
        self._put(2, self._header(), curses.A_BOLD | curses.A_UNDERLINE)
        room = self._rows_room()
        if self.cursor < self.top_row:
            self.top_row = self.cursor
        elif self.cursor >= self.top_row + room:
            self.top_row = self.cursor - room + 1
        self.top_row = max(0, min(self.top_row, max(0, len(self.shown) - room)))
        for i, r in enumerate(self.shown[self.top_row:self.top_row + room]):
            at = self.top_row + i
            self._put(3 + i, self._line(r), curses.A_REVERSE if at == self.cursor else 0)
        status = self._status()
        for j, line in enumerate(status):
            self._put(h - 1 - len(status) + j, " " + line, curses.A_BOLD)
        if self.prompt is not None:
            self._put(h - 1, f"filter (glob, /regex/, ! for the others): {self.prompt}")
        else:
            self._put(h - 1, " " + KEYS, curses.A_DIM)
        scr.noutrefresh()
        curses.doupdate()

    def _header(self) -> str:
        def col(name: str, title: str, width: int, left: bool = False) -> str:
            mark = self.mark[self.view.reverse] if self.view.sort == name else ""
            text = mark + title
            return text.ljust(width) if left else text.rjust(width)

        return (col("rate", "RATE/s", 9) + " " +
                (col("updates", "UPD/s", 9) + " " if self.view.probes else "") +
                col("value", "VALUE", 9) + " " + col("mean", "MEAN", 9) + " " +
                col("kind", "KIND", 9, True) + " " + col("pid", "PID", 7) + "  " +
                "TREND".ljust(TREND) + "  " + col("name", "SERIES", 6, True))

    def _line(self, r: Row) -> str:
        probes = f"{short(r.updates, 9):>9} " if self.view.probes else ""
        return (f"{short(r.rate, 9):>9} {probes}{short(r.value, 9):>9} "
                f"{short(r.mean, 9):>9} {r.series.kind:<9} {r.series.pid or '':>7}  "
                f"{sparkline(r.trend(self.top.refreshed), TREND, self.bars):<{TREND}}  "
                f"{r.name()}")
