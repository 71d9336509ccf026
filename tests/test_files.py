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
    "funcs --debuginfo": ("funcs", "/bin/true", "--debuginfo", "PATH"),
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


# Root reads any file; without these capabilities it obeys a file's mode as any user.
WITHOUT_DAC = ("setpriv", "--bounding-set=-dac_override,-dac_read_search",
               "--inh-caps=-dac_override,-dac_read_search")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_file_that_cannot_be_read_is_one_line(session_cache: Path, tmp_path: Path,
                                                command: str) -> None:
    """A file that is there but that noop may not read (mode 000, noop as root without
    the capability to override a file's mode): one line naming it, exit 1 or 2."""
    import subprocess

    from harness.noop import REPO
    from harness.noop import command as noop_command

    path = tmp_path / "unreadable"
    path.write_bytes(Path("/bin/true").read_bytes())
    path.chmod(0)
    args = [str(path) if a == "PATH" else a for a in COMMANDS[command]]
    done = subprocess.run([*WITHOUT_DAC, *noop_command(*args)], cwd=REPO, timeout=60,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "NOOP_CACHE_DIR": str(tmp_path / "cache")})
    # commands that may attach say first what the missing capability stops
    lines = [line for line in done.stderr.strip().splitlines()
             if not line.startswith("noop: warning: without CAP_DAC_READ_SEARCH")]
    assert done.returncode in (1, 2), (done.returncode, done.stderr)
    assert len(lines) == 1, done.stderr
    assert str(path) in lines[0] and "permission denied" in lines[0], lines[0]
    assert "internal error" not in lines[0], lines[0]


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


# Where NOOP_CACHE_DIR can point that holds nothing; each is made by the fixture below.
CACHE_CLASSES = ("a-file", "fifo", "device", "under-a-file", "link-loop", "long-name",
                 "read-only", "full", "unreadable")
CACHE_COMMANDS = {"check --binary": ("check", "--binary", "EXAMPLE"),
                  "check --binary stripped": ("check", "--binary", "STRIPPED"),
                  "struct stripped": ("struct", "STRIPPED", "main.metrics")}


@pytest.fixture(scope="module")
def no_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    import subprocess

    d = tmp_path_factory.mktemp("no-cache")
    (d / "file").write_text("x")
    os.mkfifo(d / "fifo")
    (d / "a").symlink_to(d / "b")
    (d / "b").symlink_to(d / "a")
    (d / "closed").mkdir(mode=0)  # read without the capability to override modes
    mounts = []
    try:
        for name, options in (("ro", "ro,size=1m"), ("full", "size=64k")):
            (d / name).mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d / name)],
                           check=True)
            mounts.append(d / name)
        fd = os.open(d / "full" / "filler", os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError):  # filled to its last byte
            while True:
                os.write(fd, bytes(4096))
        os.close(fd)
        yield {"a-file": str(d / "file"), "fifo": str(d / "fifo"), "device": "/dev/full",
               "under-a-file": str(d / "file" / "cache"), "link-loop": str(d / "a"),
               "long-name": str(d / ("x" * 300)), "read-only": str(d / "ro"),
               "full": str(d / "full"), "unreadable": str(d / "closed" / "cache")}
    finally:
        for where in mounts:
            subprocess.run(["umount", str(where)], check=False)


@pytest.fixture(scope="module")
def answers(example: Path, stripped_example: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each command's output with a cache that works, to compare with."""
    from harness.noop import run

    cache = tmp_path_factory.mktemp("working-cache")
    out = {}
    for name, args in CACHE_COMMANDS.items():
        done = run(*_filled(args, example, stripped_example), cache=cache, timeout=120)
        assert done.returncode == 0, done.stderr
        out[name] = done.stdout
    return out


def _costless(text: str) -> str:
    """``text`` without the per-hit costs, measured again by each run that has no cache."""
    import re

    return re.sub(r"[\d,.]+ ns", "N ns", text)


def _filled(args: tuple[str, ...], example: Path, stripped: Path) -> list[str]:
    return [str(example) if a == "EXAMPLE" else str(stripped) if a == "STRIPPED" else a
            for a in args]


@pytest.mark.parametrize("command", sorted(CACHE_COMMANDS))
@pytest.mark.parametrize("kind", CACHE_CLASSES)
def test_a_cache_that_cannot_be_written_is_one_warning(
        no_cache: dict[str, str], answers: dict[str, str], example: Path,
        stripped_example: Path, tmp_path: Path, command: str, kind: str) -> None:
    """Whatever NOOP_CACHE_DIR is, the answer is the one a working cache gives, with
    one warning that names the directory and why; nothing is left in a private
    directory, and no partial file where a write failed."""
    import subprocess

    from harness.noop import REPO, run
    from harness.noop import command as noop_command

    where = no_cache[kind]
    args = _filled(CACHE_COMMANDS[command], example, stripped_example)
    if kind == "unreadable":
        done = subprocess.run([*WITHOUT_DAC, *noop_command(*args)], cwd=REPO, timeout=120,
                              capture_output=True, text=True, check=False,
                              env={**os.environ, "NOOP_CACHE_DIR": where,
                                   "TMPDIR": str(tmp_path)})
    else:
        done = run(*args, timeout=120, env={"NOOP_CACHE_DIR": where, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert _costless(done.stdout) == _costless(answers[command])
    lines = [line for line in done.stderr.strip().splitlines()
             if not line.startswith("noop: warning: without CAP_DAC_READ_SEARCH")]
    assert len(lines) == 1 and lines[0].startswith("noop: cache: "), done.stderr
    shown = where if len(where) < 200 else where[:40]
    assert shown in lines[0] or "/dev/full" in lines[0] or (
        kind in ("under-a-file", "unreadable") and str(Path(where).parent) in lines[0]), \
        lines[0]
    assert not list(tmp_path.iterdir())  # the private directory removed at exit
    if kind == "full":
        assert not list(Path(where).rglob(".tmp-*"))
