"""The cyclic garbage collector paused while a plan or an answer is made.

Making one allocates millions of objects that live until it is done (the raw DWARF
reader's tables and names, pyelftools' DIEs, which hold each other in cycles): each
of the collector's full passes walks all of them, and a plan of a large binary spent
a tenth of its time there (0.45 s of ``noop funcs``' 4.7 s on a 130 MB Rust build,
0.25 s of the Rust preset's 3.05 s). What it leaves behind is collected after: by the
next pass once the collector runs again, ``resolve`` after each target, the daemon
once its plan is loaded (``daemon.settled``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside; the collector as it was after (nested: the
    outermost turns it back on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
