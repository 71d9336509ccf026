"""Container ids and pod UIDs from /proc/PID/cgroup, as each runtime and cgroup driver
writes them (the texts below are their formats; test_container.py reads real ones)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.kernel.aggregate import Row
from agent.live import cgroups
from agent.live.cgroups import Processes, Where
from agent.output.usermetrics import UserMetrics
from agent.plan.model import LabelRule, MetricPlan, Plan, ProbePlan, ValueSpec

ID = "4f1c0c6b1a6a2a0f3e8f5b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e"
UID = "0b7f9c1e-3d2a-4c5b-9e8f-1a2b3c4d5e6f"

CASES = {
    "podman, cgroup v1, cgroupfs": (
        f"9:name=systemd:/libpod_parent/libpod-{ID}\n8:pids:/libpod_parent/libpod-{ID}\n"
        f"0::/libpod_parent/libpod-{ID}\n", Where(ID)),
    "podman, cgroup v2, systemd": (f"0::/machine.slice/libpod-{ID}.scope/container\n",
                                   Where(ID)),
    "docker, cgroup v1": (f"12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/\n",
                          Where(ID)),
    "docker, cgroup v2": (f"0::/system.slice/docker-{ID}.scope\n", Where(ID)),
    "kubelet cgroupfs, containerd, v1": (
        f"11:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{ID}\n"
        f"1:name=systemd:/kubepods/besteffort/pod{UID}/{ID}\n", Where(ID, UID)),
    "kubelet systemd, containerd, v2": (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{UID.replace('-', '_')}.slice/cri-containerd-{ID}.scope\n", Where(ID, UID)),
    "kubelet systemd, CRI-O, v2": (
        f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{ID}.scope\n",
        Where(ID, UID)),
    "a pod's cgroup, no container": (f"0::/kubepods/pod{UID}\n", Where("", UID)),
    "a host service": ("0::/system.slice/ssh.service\n", Where()),
    "the root": ("0::/\n", Where()),
    "podman's monitor (conmon) is not the container": (
        f"0::/machine.slice/libpod-conmon-{ID}.scope\n", Where()),
    "nothing": ("", Where()),
}


@pytest.mark.parametrize("text,want", CASES.values(), ids=CASES.keys())
def test_parse(text: str, want: Where) -> None:
    assert cgroups.parse(text) == want


def test_labels_on_the_host_are_none() -> None:
    assert Where().labels() == ()
    assert Where(ID, UID).labels() == (("container_id", ID), ("pod_uid", UID))


def test_matches_by_prefix_and_pod() -> None:
    w = Where(ID, UID)
    assert cgroups.matches(w, ID[:12], None) and cgroups.matches(w, None, UID)
    assert not cgroups.matches(w, "0" * 12, None)
    assert not cgroups.matches(Where(), ID[:12], None)  # the host is in no container
    assert not cgroups.matches(Where(ID), None, UID)


def test_this_process() -> None:
    """Read for a live process; a gone one is None."""
    assert cgroups.where(os.getpid()) is not None
    assert cgroups.where(2**22 + 1) is None


# ---------------------------------------------------------------------------------------
# Series from in-kernel rows: labelled by the hitting process's container, kept when it
# exits (rows folded into noop, then deleted), limited to a container.


def _fake_proc(root: Path, cgroups_of: dict[int, str]) -> Path:
    for pid, text in cgroups_of.items():
        (root / str(pid)).mkdir(parents=True, exist_ok=True)
        (root / str(pid) / "cgroup").write_text(text)
    return root


def _series(users: UserMetrics, rows: list[Row]) -> dict[tuple[tuple[str, str], ...], float]:
    (fam,) = users.families({0: rows})
    return {tuple(sorted(s.labels.items())): s.value for s in fam.samples}


def _row(pid: int, who: str, hits: int, born: int) -> Row:
    return Row({"$pid": pid, "who": who}, (), hits, born, {})


PLAN = Plan("t", (), (ProbePlan("p", "t", (ValueSpec("who", "string", 16, 16, "string", "w"),),
                                (), metrics=(MetricPlan("calls", "counter", "", None, (),
                                                        (LabelRule("who", "who"),), 100,
                                                        "kernel"),)),))


def test_rows_carry_their_containers_and_outlive_their_process(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, {10: f"0::/system.slice/docker-{ID}.scope\n",
                                 11: "0::/user.slice\n"})
    users = UserMetrics(PLAN, Processes(proc=proc))
    rows = [_row(10, "GET", 3, 1), _row(11, "GET", 4, 2), _row(10, "PUT", 1, 3)]
    want = {(("container_id", ID), ("who", "GET")): 3.0, (("who", "GET"),): 4.0,
            (("container_id", ID), ("who", "PUT")): 1.0}
    assert _series(users, rows) == want
    # 10 exits: its rows are folded into noop and leave the map; /proc forgets it.
    users.retire(0, [r for r in rows if r.key and r.key["$pid"] == 10])
    (proc / "10" / "cgroup").unlink()
    users.processes.forget({10})
    left = [r for r in rows if r.key and r.key["$pid"] == 11]
    assert _series(users, left) == want  # nothing lost, nothing counted twice
    # A new process of the same container goes on from there.
    _fake_proc(proc, {12: f"0::/system.slice/docker-{ID}.scope\n"})
    assert _series(users, [*left, _row(12, "GET", 2, 4)])[
        (("container_id", ID), ("who", "GET"))] == 5.0


def test_rows_of_other_containers_are_left_out(tmp_path: Path) -> None:
    other = "9" * 64
    proc = _fake_proc(tmp_path, {10: f"0::/system.slice/docker-{ID}.scope\n",
                                 11: f"0::/system.slice/docker-{other}.scope\n",
                                 12: "0::/\n"})
    users = UserMetrics(PLAN, Processes({0: (ID[:12], None)}, proc=proc))
    rows = [_row(10, "GET", 3, 1), _row(11, "GET", 4, 2), _row(12, "GET", 5, 3),
            _row(13, "GET", 6, 4)]  # 13: exited unseen, so not known to be in it
    assert _series(users, rows) == {(("container_id", ID), ("who", "GET")): 3.0}
