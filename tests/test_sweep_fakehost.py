"""A fake sysfs tree for the `host` board with writable cpufreq files, used by the sweep tests.

Two clusters on this machine's first two cores (so pinning really works): L = the
first core (policy0, slower table), B = the second (policy1, faster table). The
policies start under the userspace governor, and `scaling_cur_freq` is a symlink to
`scaling_setspeed`: a write is "in effect" at once, which is what a kernel does
for userspace requests within the limits, and it works in a subprocess too
(no in-process fake kernel needed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from governors import make_governor
from profiler.boards.host import host_board

L_FREQS_KHZ = (408_000, 816_000, 1_200_000)
B_FREQS_KHZ = (600_000, 1_000_000, 1_400_000, 1_800_000)


@dataclass
class FakeHost:
    sys: Path  # pass as --sysfs-root
    cores: tuple[int, int]  # (L core, B core)

    def policy(self, letter: str) -> Path:
        return self.sys / "devices/system/cpu/cpufreq" / ("policy0" if letter == "L" else "policy1")

    def setspeed_khz(self, letter: str) -> int:
        return int((self.policy(letter) / "scaling_setspeed").read_text())


def _put(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")


def usable_cores() -> tuple[int, int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two CPU cores to build a two-cluster host")
    return cores[0], cores[1]


def build_fake_host(root: Path) -> FakeHost:
    """root/sys: cpu topology for two online cores, one cpufreq policy each."""
    l_core, b_core = usable_cores()
    sys_dir = root / "sys"
    cpu = sys_dir / "devices/system/cpu"
    online = f"{l_core},{b_core}"
    for name in ("online", "present", "possible"):
        _put(cpu / name, online)
    for n, (core, freqs) in enumerate(((l_core, L_FREQS_KHZ), (b_core, B_FREQS_KHZ))):
        pol = cpu / "cpufreq" / f"policy{n}"
        for name, text in {
            "related_cpus": str(core), "affected_cpus": str(core),
            "cpuinfo_min_freq": str(freqs[0]), "cpuinfo_max_freq": str(freqs[-1]),
            "scaling_available_frequencies": " ".join(map(str, freqs)),
            "scaling_available_governors": "userspace performance schedutil",
            "scaling_governor": "userspace",
            "scaling_min_freq": str(freqs[0]), "scaling_max_freq": str(freqs[-1]),
            "scaling_setspeed": str(freqs[1]),
        }.items():
            _put(pol / name, text)
        (pol / "scaling_cur_freq").symlink_to("scaling_setspeed")
        (cpu / f"cpu{core}").mkdir(parents=True, exist_ok=True)
        (cpu / f"cpu{core}" / "cpufreq").symlink_to(os.path.relpath(pol, cpu / f"cpu{core}"))
    return FakeHost(sys_dir, (l_core, b_core))


def test_fake_host_reads_as_two_clusters_with_tables(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path)
    board = host_board(fake.sys)
    assert list(board.processors) == ["B", "L"]
    assert board.processor("L").cores == (fake.cores[0],)
    assert board.processor("B").cores == (fake.cores[1],)
    assert board.processor("L").freqs_khz == L_FREQS_KHZ
    assert board.processor("B").freqs_khz == B_FREQS_KHZ


def test_governor_sets_and_reads_back_on_the_fake_host(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path)
    board = host_board(fake.sys)
    gov = make_governor(board, board.processor("B"), fake.sys)
    saved = gov.save()
    res = gov.set_level(4)
    assert res.ok and res.effective_khz == B_FREQS_KHZ[3] == fake.setspeed_khz("B")
    gov.restore(saved)
    assert fake.setspeed_khz("B") == B_FREQS_KHZ[1]
