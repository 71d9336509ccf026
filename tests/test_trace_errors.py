"""Bad input to check and trace: one line per problem (file:line:col for a spec), exit 2
for what the user wrote, a clear line for what the machine lacks, and no traceback."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from harness.noop import command, one_line_each, popen, run
from harness.programs import REPO, NoopRun

BAD_SPEC = """\
targets:
  ex:
    binary: {binary}
probes:
  - name: a
    function: main.placeOrdr
  - name: b
    function: main.placeOrder
    values:
      x: o.Custmer
      y: o.ID.foo
      z: q.ID
      s: {{read: o.ID, as: string}}
"""


def test_every_resolve_error_at_once_with_its_place(noop: NoopRun, example: Path,
                                                    tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text(BAD_SPEC.format(binary=example))
    done = noop("check", "--config", spec)
    assert done.returncode == 2
    lines = one_line_each(done.stderr)
    assert lines == [
        f"noop: {spec}:6:15: probe a: function 'main.placeOrdr' not found "
        "(did you mean main.placeOrder?)",
        f"noop: {spec}:10:10: probe b: x: main.order has no field 'Custmer' "
        "(its fields: ID, Customer, Items)",
        f"noop: {spec}:11:10: probe b: y: o.ID is int64, not a struct or a pointer to one "
        "(drop '.foo')",
        f"noop: {spec}:12:10: probe b: main.placeOrder has no parameter 'q' (parameters: o)",
        f"noop: {spec}:13:17: probe b: s: o.ID is int64: it cannot be read as string "
        "(strings come from Go strings, []byte and byte arrays)",
    ]


def test_malformed_yaml(noop: NoopRun, tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text("targets:\n  ex: {binary: x\nprobes: []\n")
    done = noop("check", "--config", spec)
    assert done.returncode == 2
    (line,) = one_line_each(done.stderr)
    assert re.match(rf"noop: {re.escape(str(spec))}:\d+:\d+: not valid YAML", line), line


def test_missing_binary_in_spec_names_the_target(noop: NoopRun, tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text("targets:\n  ex: {binary: ./nothere}\nprobes:\n"
                    "  - {name: a, function: main.main}\n")
    done = noop("check", "--config", spec)
    assert done.returncode == 2
    assert one_line_each(done.stderr) == [
       f"noop: {spec}:2:3: target ex: {tmp_path}/nothere: no such file (check the path)"]


def test_unknown_spec_file(noop: NoopRun, tmp_path: Path) -> None:
    done = noop("check", "--config", tmp_path / "none.yaml")
    assert done.returncode != 0
    assert len(one_line_each(done.stderr)) == 1


@pytest.mark.parametrize("what", ["missing", "not-elf", "stripped-c", "not-go"])
def test_preset_binary_errors(noop: NoopRun, example: Path, c_layouts: Path,
                              tmp_path: Path, what: str) -> None:
    path = tmp_path / what
    if what == "not-elf":
        path.write_text("#!/bin/sh\n")
    elif what == "stripped-c":  # no DWARF, no debug file, no Go runtime metadata
        shutil.copy(c_layouts, path)
        subprocess.run(["strip", str(path)], check=True)
    elif what == "not-go":
        path = c_layouts
    done = noop("--binary", path, "--duration", "1")
    assert done.returncode == 2, done.stderr
    (line,) = one_line_each(done.stderr)
    assert line.startswith(f"noop: {path}")


@pytest.mark.parametrize(("dropped", "attach", "missing"), [
    ("cap_sys_admin", "auto", None),  # uprobe_multi links need CAP_BPF and CAP_PERFMON
    ("cap_bpf,cap_perfmon", "auto", None),  # CAP_SYS_ADMIN stands for both
    ("cap_sys_admin", "perf", "CAP_SYS_ADMIN"),  # a perf-event uprobe needs it
    ("cap_sys_admin,cap_perfmon", "auto", "CAP_PERFMON"),
    ("cap_sys_admin,cap_bpf,cap_perfmon", "auto", "CAP_PERFMON, CAP_BPF"),
])
def test_without_capabilities(privileged: None, example: Path, dropped: str, attach: str,
                              missing: str | None) -> None:
    """Each capability dropped in turn: noop runs with what its way of attaching needs
    (tried on this kernel, which makes uprobe_multi links), else names what lacks."""
    capsh = shutil.which("capsh")
    assert capsh, "capsh not found: run ./setup.sh"
    done = subprocess.run([capsh, f"--drop={dropped}", "--", "-c",
                           "exec " + shlex.join(command("--binary", example, "--duration", "1"))],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "NOOP_ATTACH": attach})
    if missing is None:
        assert done.returncode == 0, done.stderr
        assert re.search(r"^noop: \d+ uprobes on ", done.stderr, re.M), done.stderr
        return
    assert done.returncode == 1
    (line,) = one_line_each(done.stderr)
    assert line.startswith(f"noop: not allowed to load BPF programs: missing {missing} ("), line


def test_without_kernel_headers(privileged: None, example: Path) -> None:
    done = run("--binary", example, "--duration", "1", env={"BCC_KERNEL_SOURCE": "/nonexistent"},
               timeout=120)
    assert done.returncode == 1
    (line,) = one_line_each(done.stderr)
    assert line.startswith("noop: no kernel headers for BCC"), line


def test_pid_that_does_not_exist(noop: NoopRun, privileged: None, example: Path) -> None:
    gone = subprocess.Popen(["true"])  # a process ID that was, and is no more
    gone.wait()
    done = noop("--binary", example, "--pid", str(gone.pid), "--duration", "1")
    assert done.returncode == 2
    (line,) = one_line_each(done.stderr)
    assert f"no process {gone.pid}" in line


def test_one_pid_until_it_exits(noop: NoopRun, privileged: None, example: Path,
                                tmp_path: Path) -> None:
    """--pid follows that process only, and noop stops (detached) when it exits."""
    ex = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "50ms"],
                          stderr=subprocess.DEVNULL)
    other = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "50ms"],
                             stderr=subprocess.DEVNULL)
    try:
        tracer = popen("--binary", example, "--pid", str(ex.pid), "--json", "--duration", "120",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert tracer.stdout is not None
        first = tracer.stdout.readline()  # the first update: noop is attached
        assert f'"pid": {ex.pid}' in first
        time.sleep(0.5)
        ex.send_signal(signal.SIGTERM)
        out, err = tracer.communicate(timeout=30)
    finally:
        for p in (ex, other):
            p.kill()
            p.wait()
    assert tracer.returncode == 0, err
    assert f"process {ex.pid} exited: detached" in err
    assert f'"pid": {other.pid}' not in out


BAD_EXIT_SPEC = """\
targets:
  ex:
    binary: {binary}
probes:
  - name: c
    function: main.placeOrder
    at: exit
    values:
      x: ~r1
      y: {{read: o, at: exit}}
      z: {{read: ~r0, at: entry}}
      w: o.ID
"""


def test_exit_probe_errors_at_once(noop: NoopRun, example: Path, tmp_path: Path) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text(BAD_EXIT_SPEC.format(binary=example))
    done = noop("check", "--config", spec)
    assert done.returncode == 2
    assert one_line_each(done.stderr) == [
       f"noop: {spec}:9:10: probe c: main.placeOrder has no parameter or result '~r1' "
       "(did you mean '~r0'? parameters: o; results: ~r0)",
       f"noop: {spec}:10:17: probe c: y: o is the parameter's own value, not reached "
       "through a pointer; the call cannot change it for its caller (drop at: exit; it is "
       "read at entry)",
       f"noop: {spec}:11:17: probe c: z: ~r0 is a result, known only when the call returns "
       "(drop at: entry)",
   ]
