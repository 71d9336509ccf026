"""Tests for agent.doctor: each check with fakes, then for real on this machine."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from agent.kernel import kfeatures, kheaders
from agent.kernel.kheaders import HeaderSource
from agent.tools import doctor
from agent.tools.doctor import MISSING, OK, WARN, Check

# --- privileges ------------------------------------------------------------

ROOT_STATUS = "Name:\tpython3\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n"
NO_CAPS = "Name:\tpython3\nCapEff:\t0000000000000000\n"
# CAP_BPF (39) and CAP_PERFMON (38) but not CAP_SYS_ADMIN (21)
BPF_ONLY = f"CapEff:\t{(1 << 39) | (1 << 38):016x}\n"


ADMIN_ONLY = f"CapEff:\t{1 << 21:016x}\n"


@pytest.mark.parametrize(
    ("status", "last_cap", "multi", "missing"),
    [
        (ROOT_STATUS, 40, False, ()),
        (ROOT_STATUS, 40, True, ()),
        (NO_CAPS, 40, False, ("CAP_SYS_ADMIN",)),
        (NO_CAPS, 40, True, ("CAP_PERFMON", "CAP_BPF")),  # links: loading is all
        (BPF_ONLY, 40, False, ("CAP_SYS_ADMIN",)),  # the uprobe PMU wants CAP_SYS_ADMIN
        (BPF_ONLY, 40, True, ()),
        (f"CapEff:\t{1 << 39:016x}\n", 40, True, ("CAP_PERFMON",)),
        # CAP_SYS_ADMIN stands for CAP_BPF and CAP_PERFMON, before 5.8 and after
        (ADMIN_ONLY, 37, False, ()),
        (ADMIN_ONLY, 40, False, ()),
        (ADMIN_ONLY, 40, True, ()),
        (NO_CAPS, 37, True, ("CAP_SYS_ADMIN",)),  # no CAP_BPF before 5.8
        ("Name:\tx\n", 40, False, ("CAP_SYS_ADMIN",)),
    ],
)
def test_missing_caps(status: str, last_cap: int, multi: bool, missing: tuple[str, ...]
                      ) -> None:
    assert doctor.missing_caps(status, last_cap, multi) == missing


def test_privileges_check_names_what_is_lacking() -> None:
    check = doctor.check_privileges(BPF_ONLY, 40, multi=False)
    assert (check.status, check.detail) == (MISSING, "lacking CAP_SYS_ADMIN")
    assert "CAP_SYS_ADMIN" in check.fix and "CAP_BPF and CAP_PERFMON" in check.fix
    assert doctor.check_privileges(BPF_ONLY, 40, multi=True).status == WARN  # loads
    check = doctor.check_privileges(NO_CAPS, 40, multi=True)
    assert (check.status, check.detail) == (MISSING, "lacking CAP_PERFMON CAP_BPF")
    assert doctor.check_privileges(ROOT_STATUS, 40, multi=False).status == OK
    # Enough to load, but some targets are out of reach: a warning naming what lacks.
    loads = f"CapEff:\t{(1 << 39) | (1 << 38) | (1 << 21) | (1 << 2):016x}\n"
    check = doctor.check_privileges(loads, 40, multi=False)
    assert (check.status, check.detail.rpartition("; ")[2]) == (WARN, "lacking CAP_SYS_PTRACE")
    assert "/proc/PID/root" in check.fix and not check.required


# --- uprobes, tracefs --------------------------------------------------------


def test_uprobes(tmp_path: Path) -> None:
    pmu = tmp_path / "type"
    assert doctor.judge_uprobes(None, pmu).status == MISSING
    assert "unreadable" in doctor.judge_uprobes(None, pmu).detail
    assert doctor.judge_uprobes({"CONFIG_UPROBE_EVENTS": "y"}, pmu).status == OK
    off = doctor.judge_uprobes({"CONFIG_UPROBES": "y"}, pmu)
    assert off.status == MISSING and "CONFIG_UPROBE_EVENTS=y" in off.fix
    pmu.write_text("8\n")
    assert doctor.judge_uprobes(None, pmu).status == OK


def test_tracefs(tmp_path: Path) -> None:
    first, second = tmp_path / "tracing", tmp_path / "debug" / "tracing"
    check = doctor.check_tracefs((first, second), multi=False)
    assert check.status == MISSING
    assert check.fix == "mount -t tracefs nodev /sys/kernel/tracing"
    links = doctor.check_tracefs((first, second), multi=True)  # links need none
    assert links.status == OK and not links.required and "not needed" in links.detail
    second.mkdir(parents=True)
    (second / "uprobe_events").write_text("")
    assert doctor.check_tracefs((first, second), multi=False).status == OK


# --- bcc -------------------------------------------------------------------

DISTRO = "/usr/lib/python3/dist-packages/bcc/__init__.py"


@pytest.mark.parametrize(
    ("info", "venv", "status", "fix_has"),
    [
        ({"file": DISTRO, "has_attach_uprobe": True, "installer": ""}, False, OK, ""),
        ({"error": "ModuleNotFoundError: No module named 'bcc'"}, False, MISSING, "python3-bpfcc"),
        ({"error": "ModuleNotFoundError: bcc"}, True, MISSING, "--system-site-packages"),
        # PyPI's unrelated "bcc" shadows the distro's module
        (
            {"file": "/venv/site-packages/bcc/__init__.py", "has_attach_uprobe": False},
            False,
            MISSING,
            "pip uninstall bcc",
        ),
        # the distro's module wins, but PyPI's sits in another directory
        (
            {
                "file": DISTRO,
                "has_attach_uprobe": True,
                "installer": "pip",
                "dist_dir": "/venv/site-packages",
            },
            False,
            WARN,
            "pip uninstall bcc",
        ),
        # BCC itself installed by pip from source: fine
        (
            {
                "file": "/venv/site-packages/bcc/__init__.py",
                "has_attach_uprobe": True,
                "installer": "pip",
                "dist_dir": "/venv/site-packages",
            },
            False,
            OK,
            "",
        ),
    ],
)
def test_judge_bcc(info: dict[str, object], venv: bool, status: str, fix_has: str) -> None:
    check = doctor.judge_bcc(info, venv)
    assert check.status == status
    assert fix_has in check.fix


def test_probe_bcc_survives_a_broken_interpreter(tmp_path: Path) -> None:
    assert "error" in doctor.probe_bcc(str(tmp_path / "no-python"))


# --- headers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "status", "fix_has"),
    [
        (HeaderSource("modules", Path("/m/build"), "x", True), OK, ""),
        (HeaderSource("merged", Path("/c/6.1.0-56-amd64"), "x", True), OK, ""),
        (HeaderSource("mergeable", Path("/s"), "not merged yet", False), WARN, "noop headers"),
        (HeaderSource("none", None, "no kernel headers", False), MISSING, "linux-headers-amd64"),
        (HeaderSource("env", Path("/x"), "bad", False), MISSING, kheaders.ENV_VAR),
    ],
)
def test_check_headers(source: HeaderSource, status: str, fix_has: str) -> None:
    check = doctor.check_headers(source)
    assert check.status == status
    assert fix_has in check.fix
    assert check.blocks == (status == MISSING)


# --- BTF ---------------------------------------------------------------------


class BtfBuilder:
    """Writes a small BTF blob: the same layout the kernel exposes."""

    def __init__(self, order: str = "<") -> None:
        self.order = order
        self.strings = bytearray(b"\0")
        self.types = bytearray()
        self.count = 0

    def name(self, text: str) -> int:
        off = len(self.strings)
        self.strings += text.encode() + b"\0"
        return off

    def add(self, kind: int, name: str, ref: int, vlen: int = 0, extra: bytes = b"") -> int:
        info = (kind << 24) | vlen
        self.types += struct.pack(self.order + "III", self.name(name) if name else 0, info, ref)
        self.types += extra
        self.count += 1
        return self.count

    def blob(self) -> bytes:
        header = struct.pack(
            self.order + "HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(self.types),
            len(self.types), len(self.strings),
        )  # fmt: skip
        return header + bytes(self.types) + bytes(self.strings)


def kernel_btf(*, kfunc: str | None, tag: bool = True, order: str = "<") -> bytes:
    b = BtfBuilder(order)
    p = b.order
    int_id = b.add(1, "int", 4, extra=struct.pack(p + "I", 32))
    b.add(4, "pt_regs", 16, 2, struct.pack(p + "3I", b.name("di"), int_id, 0) * 2)
    b.add(6, "bpf_func_id", 4, 2, struct.pack(p + "Ii", b.name("BPF_FUNC_unspec"), 0)
          + struct.pack(p + "Ii", b.name("BPF_FUNC_map_lookup_elem"), 1))  # fmt: skip
    proto = b.add(13, "", int_id, 1, struct.pack(p + "II", 0, int_id))
    lookup = b.add(12, "bpf_arena_alloc_pages", proto)
    b.add(17, "bpf_kfunc", lookup, extra=struct.pack(p + "i", -1))
    if kfunc:
        func = b.add(12, kfunc, proto)
        if tag:
            b.add(17, "bpf_kfunc", func, extra=struct.pack(p + "i", -1))
    b.add(12, "bpf_uprobe_multi_link_attach", proto)
    b.add(19, "big", 8, 1, struct.pack(p + "III", b.name("X"), 1, 0))
    return b.blob()


def test_parse_btf_reads_funcs_kfuncs_and_helpers() -> None:
    facts = kfeatures.parse_btf(kernel_btf(kfunc=None))
    assert facts.tagged
    assert facts.kfuncs == {"bpf_arena_alloc_pages"}
    assert "bpf_uprobe_multi_link_attach" in facts.funcs
    assert facts.helpers == {"BPF_FUNC_unspec", "BPF_FUNC_map_lookup_elem"}
    assert kfeatures.find_xmm_helper(facts) is None


def test_parse_btf_big_endian() -> None:
    facts = kfeatures.parse_btf(kernel_btf(kfunc="bpf_get_fp_reg", order=">"))
    assert kfeatures.find_xmm_helper(facts) == "bpf_get_fp_reg"


@pytest.mark.parametrize(
    ("kfunc", "tag", "found"),
    [
        ("bpf_get_fp_reg", True, "bpf_get_fp_reg"),
        # an ordinary kernel function of that name, in a kernel that tags
        # kfuncs, is not callable from BPF
        ("bpf_get_fp_reg", False, None),
        ("bpf_something_else", True, None),
    ],
)
def test_find_xmm_helper(kfunc: str, tag: bool, found: str | None) -> None:
    facts = kfeatures.parse_btf(kernel_btf(kfunc=kfunc, tag=tag))
    assert kfeatures.find_xmm_helper(facts) == found


def test_untagged_kernels_fall_back_to_function_names() -> None:
    facts = kfeatures.BtfFacts(frozenset({"bpf_get_fp_reg"}), frozenset(), False, frozenset())
    assert kfeatures.find_xmm_helper(facts) == "bpf_get_fp_reg"


def test_xmm_check_is_not_fatal() -> None:
    facts = kfeatures.parse_btf(kernel_btf(kfunc=None))
    check = doctor.check_xmm_helper(facts)
    assert (check.status, check.required, check.blocks) == (MISSING, False, False)
    assert "falls back" in check.fix
    found = doctor.check_xmm_helper(kfeatures.parse_btf(kernel_btf(kfunc="bpf_get_fp_reg")))
    assert (found.status, found.detail) == (OK, "bpf_get_fp_reg: float arguments are read "
                                            "where they are passed")


def test_parse_btf_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        kfeatures.parse_btf(b"\0" * 32)
    assert kfeatures.xmm_helper_available(Path("/nonexistent/vmlinux")) is None


# --- rendering and exit status -------------------------------------------------


def _fake_checks() -> tuple[Check, ...]:
    return (
        Check("a", "bpf syscall", OK, "loads a kprobe-type program"),
        Check("b", "tracefs", MISSING, "none", "mount -t tracefs nodev /sys/kernel/tracing"),
        Check("c", "xmm read helper", MISSING, "none", "noop falls back", required=False),
    )


def test_render_one_line_per_check_and_a_fix_line() -> None:
    text = doctor.render(_fake_checks())
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["ok", "bpf", "syscall"]
    assert lines[1].startswith("missing") and lines[2].strip().startswith("fix: mount")
    assert lines[-1].startswith("noop cannot run")
    assert all(len(line) <= 80 for line in lines)
    assert not doctor.can_run(_fake_checks())
    assert doctor.can_run(_fake_checks()[::2])


def test_a_noop_without_its_walk_in_c_is_warned_of() -> None:
    assert doctor.check_native(True).status == OK
    got = doctor.check_native(False)
    assert got.status == WARN and not got.blocks and "python3-dev" in got.fix


def test_a_raising_check_becomes_missing() -> None:
    def check_boom() -> Check:
        raise RuntimeError("probe broke")

    (check,) = doctor.run_checks((check_boom,))
    assert (check.name, check.status) == ("boom", MISSING)
    assert "probe broke" in check.detail


# --- privileged: the real checks on this machine ---------------------------

needs_root = pytest.mark.usefixtures("privileged")


@needs_root
def test_real_bpf_probes() -> None:
    assert doctor.check_bpf_syscall().status == OK
    assert doctor.check_ringbuf().status == OK
    assert doctor.check_privileges().status == OK
    assert doctor.check_uprobes().status == OK


@needs_root
def test_real_vmlinux_btf_parses() -> None:
    if not kfeatures.VMLINUX_BTF.exists():
        pytest.skip("kernel without CONFIG_DEBUG_INFO_BTF")  # a real absence
    facts = kfeatures.vmlinux_btf()
    assert facts is not None, f"{kfeatures.VMLINUX_BTF} exists but did not parse"
    assert "BPF_FUNC_map_lookup_elem" in facts.helpers
    assert "bpf_prog_load" in facts.funcs
    # the answer the loader will use; mainline kernels have no such helper
    assert kfeatures.xmm_helper_available() in (None, *kfeatures.XMM_HELPERS)


@needs_root
def test_real_doctor_passes_once_headers_are_prepared(tmp_path: Path) -> None:
    if not Path("/sys/kernel/tracing/uprobe_events").exists():
        pytest.fail("tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing")
    env = {k: v for k, v in os.environ.items() if k != kheaders.ENV_VAR}
    env["NOOP_CACHE_DIR"] = str(tmp_path)
    if kheaders.debian_pairs():
        kheaders.prepare_headers(tmp_path)
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "agent.tools.doctor", "--json"],
        capture_output=True, text=True, cwd=repo, env=env, timeout=120, check=False,
    )  # fmt: skip
    doc = json.loads(done.stdout)
    names = [c["name"] for c in doc["checks"]]
    assert names == [
        "bpf", "uprobes", "privileges", "tracefs", "bcc", "native", "headers", "ringbuf",
        "xmm", "uprobe-multi", "costs",
    ]  # fmt: skip
    (walk,) = (c for c in doc["checks"] if c["name"] == "native")
    assert walk["status"] == OK, walk  # set-up installs the compiler it needs
    blocking = [c for c in doc["checks"] if c["required"] and c["status"] != OK]
    assert blocking == [], blocking
    (headers,) = (c for c in doc["checks"] if c["name"] == "headers")
    assert headers["status"] == OK, headers
    (costs,) = (c for c in doc["checks"] if c["name"] == "costs")  # calibrated, as root
    assert costs["status"] == OK and re.fullmatch(
        r"emulated [\d,]+ ns, single-stepped [\d,]+ ns", costs["detail"]), costs
    assert doc["ok"] is True and done.returncode == 0
