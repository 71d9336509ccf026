"""How CI makes its machine and reads its result: the apt sources a new root (and the
image's base) is made from, whatever the machine calls them (deploy/image/apt-sources);
every download retried when the registry failed it and reported apart
(deploy/fetch-retry); and all of setup.sh test's passes and checks counted in one line
(tests/harness/results.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FETCH = REPO / "deploy" / "fetch-retry"
APT_SOURCES = REPO / "deploy" / "image" / "apt-sources"
RESULTS = REPO / "tests" / "harness" / "results.py"

DEBIAN = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {}\nComponents: main\n"
# (file under /etc/apt, its text, whether it names Debian's bookworm for apt)
SOURCES = [
    ("sources.list.d/debian.sources", DEBIAN.format("bookworm bookworm-updates"), True),
    ("sources.list.d/0000sources.sources", DEBIAN.format("bookworm"), True),  # mmdebstrap's
    ("sources.list", "deb http://deb.debian.org/debian bookworm main\n", True),
    ("sources.list", "deb [arch=amd64 signed-by=/k.gpg] http://mirror/debian bookworm main\n",
     True),
    ("sources.list.d/security.list",
     "deb http://security.debian.org/debian-security bookworm-security main\n", True),
    ("sources.list.d/old.list", "deb http://archive.debian.org/debian bookworm/updates main\n",
     True),
    ("sources.list", "# deb http://deb.debian.org/debian bookworm main\n", False),
    ("sources.list", "deb-src http://deb.debian.org/debian bookworm main\n", False),
    ("sources.list.d/gcloud.list",
     "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n", False),
    ("sources.list.d/node.sources", "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\n"
     "Suites: nodistro\nComponents: main\n", False),
    ("sources.list.d/debian.sources", DEBIAN.format("bookworm") + "Enabled: no\n", False),
    ("sources.list.d/debian.sources", "# Types: deb\n# Suites: bookworm\n", False),
    ("sources.list.d/debian.sources", DEBIAN.format("trixie"), False),
    ("sources.list.d/debian.sources.disabled", DEBIAN.format("bookworm"), False),  # not apt's
    ("sources.list.d/docker.list",
     "deb [arch=amd64] https://download.docker.com/linux/debian bookworm stable\n", False),
    ("sources.list.d/pgdg.list",
     "deb http://apt.postgresql.org/pub/repos/apt bookworm-pgdg main\n", False),
    ("sources.list.d/backports.list",
     "deb http://deb.debian.org/debian bookworm-backports main contrib\n", True),
    ("sources.list.d/both.sources", "Types: deb\nURIs: https://deb.nodesource.com/node\n"
     "Suites: nodistro\nComponents: main\n\n" + DEBIAN.format("bookworm"), True),
]


@pytest.mark.parametrize(("name", "text", "names_it"), SOURCES)
def test_the_apt_sources_a_root_is_made_from(tmp_path: Path, name: str, text: str,
                                             names_it: bool) -> None:
    """Every file apt reads that names the suite, by whatever name, and no other."""
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "NOOP_APT_SOURCES"}
    done = subprocess.run([str(APT_SOURCES), "bookworm"], capture_output=True, text=True,
                          timeout=60, check=False, env={**env, "NOOP_APT_ETC": str(etc)})
    if names_it:
        assert (done.returncode, done.stdout.split()) == (0, [str(etc / name)]), done.stderr
    else:
        assert (done.returncode, done.stdout) == (1, "")
        (line,) = done.stderr.strip().splitlines()
        assert "name Debian's bookworm: set NOOP_APT_SOURCES=FILE" in line


# What apt, pip and mmdebstrap print when the network or the registry failed them.
TROUBLE = [
    "E: Failed to fetch http://deb.debian.org/debian/pool/main/l/llvm.deb  503  Service "
    "Unavailable [IP: 151.101.2.132 80]",
    "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary "
    "failure resolving 'deb.debian.org'",
    "E: Failed to fetch http://x/y.deb  Hash Sum mismatch",
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError(...)': /simple/orjson/\n"
    "ERROR: No matching distribution found for orjson==3.12.0",
    "ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host="
    "'files.pythonhosted.org', port=443): Max retries exceeded with url: /x.whl",
    "pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='pypi.org', "
    "port=443): Read timed out.",
]
OTHER = [
    "E: Unable to locate package python3-nosuch",
    "ERROR: No matching distribution found for orjson==99.0",
    "error: command 'gcc' failed: No such file or directory",
    # pip retried a connection once, then failed for a reason of its own
    "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(...)'"
    ": /simple/x/\nerror: subprocess-exited-with-error\n  gcc: error: _walk.c: No such file",
]


def _fetch(tmp_path: Path, output: str, status: int, then_ok: bool = False
           ) -> tuple[subprocess.CompletedProcess[str], int]:
    """deploy/fetch-retry around a command that prints ``output`` and exits ``status``
    (then, with ``then_ok``, succeeds the second time); and how often it ran."""
    count = tmp_path / "count"
    count.write_text("")
    script = tmp_path / "download"
    script.write_text(f"#!/bin/sh\necho x >>{count}\n"
                      + (f'[ "$(wc -l <{count})" -gt 1 ] && exit 0\n' if then_ok else "")
                      + f"cat <<'EOF' >&2\n{output}\nEOF\nexit {status}\n")
    script.chmod(0o755)
    done = subprocess.run([str(FETCH), str(script)], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**os.environ, "NOOP_FETCH_PAUSES": "0 0"})
    return done, len(count.read_text().splitlines())


@pytest.mark.parametrize("output", TROUBLE)
def test_registry_trouble_is_tried_three_times_then_said_apart(tmp_path: Path,
                                                                 output: str) -> None:
    done, runs = _fetch(tmp_path, output, 100)
    assert (done.returncode, runs) == (75, 3)
    assert done.stderr.strip().splitlines()[-1].startswith("registry trouble: ")
    done, runs = _fetch(tmp_path, output, 100, then_ok=True)
    assert (done.returncode, runs) == (0, 2), done.stderr


@pytest.mark.parametrize("output", OTHER)
def test_another_failure_returns_at_once_as_it_is(tmp_path: Path, output: str) -> None:
    done, runs = _fetch(tmp_path, output, 100)
    assert (done.returncode, runs) == (100, 1)
    assert "registry trouble" not in done.stderr and output in done.stderr


def test_one_pause_given_is_used_for_both(tmp_path: Path) -> None:
    count = tmp_path / "count"
    script = tmp_path / "download"
    script.write_text(f"#!/bin/sh\necho x >>{count}\necho 'E: Failed to fetch x' >&2\nexit 100\n")
    script.chmod(0o755)
    done = subprocess.run([str(FETCH), str(script)], capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "NOOP_FETCH_PAUSES": "0"})
    assert (done.returncode, len(count.read_text().splitlines())) == (75, 3), done.stderr


def _report(path: Path, *cases: str) -> None:
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite '
                    f'name="pytest">{"".join(cases)}</testsuite></testsuites>')


def _case(name: str, inner: str = "") -> str:
    return f'<testcase classname="tests.test_x" name="{name}" time="0.1">{inner}</testcase>'


def _summary(folder: Path, *checks: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, str(RESULTS), str(folder), *checks],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout.strip().splitlines()


def test_one_line_counts_every_pass_and_check(tmp_path: Path) -> None:
    """Three passes' reports and three checks: a test failed in its call and again in
    its teardown counts once; the line is last, and kept in DIR/summary."""
    _report(tmp_path / "1-parallel.xml", _case("a"), _case("b"),
            _case("c", '<failure message="assert 1 == 2"/><error message="teardown"/>'))
    _report(tmp_path / "2-perf.xml", _case("a"), _case("d", '<skipped message="no"/>'))
    _report(tmp_path / "3-serial.xml", _case("e", '<error message="fixture"/>'))
    status, lines = _summary(tmp_path, "ruff=0", "mypy=1", "systemd-analyze security=0")
    assert status == 1
    assert lines[-1] == "5 passed, 3 failed, 1 skipped"
    assert (tmp_path / "summary").read_text() == lines[-1] + "\n"
    assert {line.split(": ")[0] for line in lines[:-1]} == {
        "FAILED tests.test_x::c", "FAILED tests.test_x::e", "FAILED mypy"}


def test_registry_trouble_is_counted_apart_from_failures(tmp_path: Path) -> None:
    trouble = ('<error message="Failed: registry trouble: mmdebstrap could not download '
               'after 3 tries: Failed to fetch"/>')
    _report(tmp_path / "3-serial.xml", _case("a"), _case("image", trouble),
            _case("pod", trouble))
    status, lines = _summary(tmp_path, "ruff=0")
    assert (status, lines[-1]) == (75, "2 passed, 0 failed, 2 not run: registry trouble")
    _report(tmp_path / "1-parallel.xml", _case("b", '<failure message="assert"/>'))
    status, lines = _summary(tmp_path, "ruff=0")
    assert (status, lines[-1]) == (1, "2 passed, 1 failed, 2 not run: registry trouble")
    # a failure that only mentions it (a test of fetch-retry itself) is a failure
    mention = ('<failure message="AssertionError: assert \'registry trouble\' not in '
               '\'registry trouble: x could not download after 3 tries\'"/>')
    _report(tmp_path / "1-parallel.xml", _case("b", mention))
    status, lines = _summary(tmp_path, "ruff=0")
    assert (status, lines[-1]) == (1, "2 passed, 1 failed, 2 not run: registry trouble")


def test_a_pass_that_left_no_report_is_a_failure(tmp_path: Path) -> None:
    """A report cut short (the pass killed while writing it) is a failure; a pass that
    wrote none is one of setup.sh's checks with pytest's exit status."""
    _report(tmp_path / "1-parallel.xml", _case("a"))
    (tmp_path / "2-perf.xml").write_text("<testsuites><testsu")
    status, lines = _summary(tmp_path, "pytest, serial: pytest's exit status 2=2")
    assert (status, lines[-1]) == (1, "1 passed, 2 failed")
    status, lines = _summary(tmp_path / "none", "ruff=0")  # nothing ran: never green
    assert (status, lines[-1]) == (1, "1 passed, 1 failed")

