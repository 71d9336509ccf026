"""Container ids and pod UIDs from /proc/PID/cgroup, as each runtime and cgroup driver
writes them (the texts below are their formats; test_container.py reads real ones)."""

from __future__ import annotations

import os

import pytest

from agent.target import cgroups
from agent.target.cgroups import Where

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
