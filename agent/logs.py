"""noop's own messages on stderr, one line each, ``noop: ...``. When stderr is the
journal's stream (systemd sets ``$JOURNAL_STREAM`` to its device and inode), each line
starts with its syslog priority, ``<3>`` error, ``<4>`` warning, ``<6>`` info, which
journald reads and strips (``SyslogLevelPrefix=``, on by default)."""

from __future__ import annotations

import os
import sys
from functools import cache

ERROR, WARNING, INFO = 3, 4, 6


@cache
def _journal() -> bool:
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


def say(message: str, priority: int = INFO) -> None:
    """One line (or several, each prefixed) on stderr."""
    prefix = f"<{priority}>" if _journal() else ""
    text = "".join(f"{prefix}noop: {line}\n" for line in message.splitlines() or [""])
    sys.stderr.write(text)
    sys.stderr.flush()
