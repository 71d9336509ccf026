"""Every command that takes a path, given each class of file that is not what it asks
for: a missing one, a directory, a FIFO, a socket, /dev/zero, a loop of symbolic links,
a name longer than the system takes, a 50 GB sparse file. Each answer is one line that
names the file and what is wrong, with exit code 1 or 2, at once: never a traceback, an
internal error, a hang on the FIFO or a read of /dev/zero to the end. A new command or
a new class is one more row."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.programs import NoopRun

# Where each command takes the path (PATH), and what else it needs.
COMMANDS = {
    "check --config": ("check", "--config", "PATH"),
    "check --binary": ("check", "--binary", "PATH"),
    "trace --binary": ("--binary", "PATH", "--duration", "1"),
    "trace --config": ("--config", "PATH", "--duration", "1"),
    "funcs": ("funcs", "PATH"),
    "struct": ("struct", "PATH", "main.T"),
    "vars": ("vars", "PATH", "main.f"),
    "lines": ("lines", "PATH", "main.f"),
    "run --config": ("run", "--config", "PATH", "--listen", "127.0.0.1:0"),
    "run --web.config.file": ("run", "--binary", "/bin/true", "--web.config.file", "PATH",
                              "--listen", "127.0.0.1:0"),
}
CLASSES = ("missing", "directory", "fifo", "socket", "dev-zero", "link-loop", "long-name",
           "sparse-50G")


@pytest.fixture(scope="module")
def odd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    d = tmp_path_factory.mktemp("odd")
    (d / "dir").mkdir()
    os.mkfifo(d / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock"))
    (d / "a").symlink_to(d / "b")
    (d / "b").symlink_to(d / "a")
    with open(d / "sparse", "wb") as f:
        f.truncate(50 << 30)
    yield {"missing": str(d / "nothing-here"), "directory": str(d / "dir"),
           "fifo": str(d / "fifo"), "socket": str(d / "sock"), "dev-zero": "/dev/zero",
           "link-loop": str(d / "a"), "long-name": str(d / ("x" * 300)),
           "sparse-50G": str(d / "sparse")}
    sock.close()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", CLASSES)
def test_a_path_that_is_not_the_file_is_one_line(noop: NoopRun, odd: dict[str, str],
                                                  command: str, kind: str) -> None:
    path = odd[kind]
    args = [path if a == "PATH" else a for a in COMMANDS[command]]
    done = noop(*args, timeout=30)
    lines = done.stderr.strip().splitlines()
    assert done.returncode in (1, 2), (done.returncode, done.stderr)
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert "internal error" not in line and "Traceback" not in done.stderr, line
    shown = path if len(path) < 200 else path[:40]
    assert shown in line or (kind == "dev-zero" and "/dev/zero" in line), line


@pytest.mark.parametrize("args", [("funcs", "EXAMPLE"), ("check", "--binary", "EXAMPLE"),
                                  ("check", "--binary", "EXAMPLE", "--json"),
                                  ("struct", "EXAMPLE", "main.metrics"), ("doctor",)],
                         ids=lambda a: " ".join(a))
def test_output_to_a_full_device_is_one_line(example: Path, session_cache: Path,
                                             args: tuple[str, ...]) -> None:
    """stdout on a full device (/dev/full): one line, exit 1, nothing at exit after it."""
    import subprocess

    from harness.noop import REPO, command, environment

    with open("/dev/full", "w") as full:
        done = subprocess.run(command(*[str(example) if a == "EXAMPLE" else a for a in args]),
                              cwd=REPO, env=environment(session_cache), stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "noop: cannot write the output: no space left on device"], done.stderr
