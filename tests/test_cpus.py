"""The default number of worker processes: the CPUs this process may use (affinity, then the
cgroup's CPU quota rounded up), read from a fake /proc and /sys tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from echomq_http.config import DEFAULT_WORKERS, Settings, cgroup_cpu_limit, usable_cpus

V1_CPU = "sys/fs/cgroup/cpu,cpuacct"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


@pytest.mark.parametrize(
    ("cpu_max", "affinity", "expected"),
    [
        ("max 100000", 8, 8),  # no quota: every CPU we may run on
        ("200000 100000", 8, 2),
        ("150000 100000", 8, 2),  # 1.5 CPUs: rounded up
        ("50000 100000", 8, 1),  # half a CPU: still one process
        ("400000 100000", 2, 2),  # a quota above the affinity mask does not add CPUs
        ("max", 3, 3),  # malformed: ignored
        ("", 3, 3),
    ],
)
def test_cgroup_v2_quota(tmp_path: Path, cpu_max: str, affinity: int, expected: int) -> None:
    root = write(tmp_path, {"proc/self/cgroup": "0::/", "sys/fs/cgroup/cpu.max": cpu_max})
    assert usable_cpus(root, affinity=affinity) == expected


def test_a_quota_on_an_ancestor_cgroup_limits_too(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "proc/self/cgroup": "0::/kubepods/pod1/web",
            "sys/fs/cgroup/kubepods/pod1/web/cpu.max": "max 100000",
            "sys/fs/cgroup/kubepods/pod1/cpu.max": "300000 100000",
            "sys/fs/cgroup/kubepods/cpu.max": "max 100000",
        },
    )
    assert cgroup_cpu_limit(root) == 3
    assert usable_cpus(root, affinity=16) == 3


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [("-1", "100000", 4), ("250000", "100000", 3), ("100000", "100000", 1), ("x", "100000", 4)],
)
def test_cgroup_v1_quota(tmp_path: Path, quota: str, period: str, expected: int) -> None:
    root = write(
        tmp_path,
        {
            "proc/self/cgroup": "4:memory:/\n3:cpu,cpuacct:/\n0::/",
            f"{V1_CPU}/cpu.cfs_quota_us": quota,
            f"{V1_CPU}/cpu.cfs_period_us": period,
        },
    )
    assert usable_cpus(root, affinity=4) == expected


def test_a_cgroup_path_not_under_the_mount_reads_the_mount_itself(tmp_path: Path) -> None:
    # A container without its own cgroup namespace: /proc/self/cgroup names the host's path,
    # while the mount shows the container's own cgroup at its top.
    root = write(
        tmp_path,
        {
            "proc/self/cgroup": "3:cpu,cpuacct:/docker/0123abc\n0::/",
            f"{V1_CPU}/cpu.cfs_quota_us": "200000",
            f"{V1_CPU}/cpu.cfs_period_us": "100000",
        },
    )
    assert usable_cpus(root, affinity=8) == 2


def test_without_cgroup_files_the_affinity_mask_decides(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path) is None
    assert usable_cpus(tmp_path, affinity=6) == 6
    assert usable_cpus(tmp_path, affinity=0) == 1
    assert usable_cpus(tmp_path) == len(os.sched_getaffinity(0))


def test_the_default_process_count_is_the_usable_cpus() -> None:
    assert 1 <= DEFAULT_WORKERS <= (os.cpu_count() or 1)
    assert usable_cpus() == DEFAULT_WORKERS
    assert Settings.from_env({}).workers == DEFAULT_WORKERS
    assert Settings.from_env({"EMQ_WORKERS": "3"}).workers == 3
