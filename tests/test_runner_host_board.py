"""The host board read from fake sysfs trees (big.LITTLE, uniform, no cpufreq)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from profiler.boards.host import format_cpu_list, host_board, parse_cpu_list, read_clusters
from profiler.boards.model import resolve_level
from profiler.errors import BoardError

RK3399_LITTLE_KHZ = (408000, 600000, 816000, 1008000, 1200000, 1416000)
RK3399_BIG_KHZ = (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_tree(root: Path, online: str, policies: dict[int, tuple[tuple[int, ...], tuple[int, ...] | None]],
              *, symlinks: bool = True, midr: dict[int, int] | None = None,
              capacity: dict[int, int] | None = None) -> Path:
    """A sysfs tree like the kernel's: cpu/online, cpuN/, cpufreq/policyN with related_cpus,
    cpuinfo_max_freq and (if given) scaling_available_frequencies; cpuN/cpufreq -> policy."""
    cpu = root / "devices/system/cpu"
    write(cpu / "online", online)
    for c in parse_cpu_list(online):
        (cpu / f"cpu{c}").mkdir(parents=True, exist_ok=True)
    for first, (cores, freqs) in policies.items():
        pol = cpu / "cpufreq" / f"policy{first}"
        write(pol / "related_cpus", " ".join(map(str, cores)))
        write(pol / "cpuinfo_max_freq", str(max(freqs) if freqs else 2_000_000 + first))
        write(pol / "cpuinfo_min_freq", str(min(freqs) if freqs else 800_000))
        if freqs:
            # Drivers list these in either order, with a trailing space.
            write(pol / "scaling_available_frequencies", " ".join(map(str, reversed(freqs))) + " ")
        for c in cores:
            if symlinks:
                os.symlink(f"../cpufreq/policy{first}", cpu / f"cpu{c}" / "cpufreq")
    for c, value in (midr or {}).items():
        write(cpu / f"cpu{c}/regs/identification/midr_el1", hex(value))
    for c, value in (capacity or {}).items():
        write(cpu / f"cpu{c}/cpu_capacity", str(value))
    return root


def rk3399(root: Path, **kw: object) -> Path:
    a53, a72 = 0x410FD034, 0x410FD082
    return make_tree(root, "0-5", {0: ((0, 1, 2, 3), RK3399_LITTLE_KHZ),
                                   4: ((4, 5), RK3399_BIG_KHZ)},
                     midr={0: a53, 1: a53, 2: a53, 3: a53, 4: a72, 5: a72}, **kw)  # type: ignore[arg-type]


def test_cpu_list_round_trip() -> None:
    assert parse_cpu_list("0-3,6,8-9\n") == (0, 1, 2, 3, 6, 8, 9)
    assert format_cpu_list((9, 8, 6, 3, 2, 1, 0)) == "0-3,6,8-9"
    assert parse_cpu_list("") == ()


def test_big_little_tree(tmp_path: Path) -> None:
    board = host_board(rk3399(tmp_path))
    assert set(board.processors) == {"B", "L"}
    big, little = board.processor("B"), board.processor("L")
    assert big.cores == (4, 5) and little.cores == (0, 1, 2, 3)
    assert big.freqs_khz == RK3399_BIG_KHZ  # ascending, whatever order sysfs listed
    assert little.freqs_khz == RK3399_LITTLE_KHZ
    assert big.governor is not None and big.governor.kind == "cpufreq"
    assert big.governor.path == "devices/system/cpu/cpufreq/policy4"
    assert little.governor is not None and little.governor.path == "devices/system/cpu/cpufreq/policy0"
    assert "Cortex-A72 x2" in big.name and "Cortex-A53 x4" in little.name
    # ARM-CO-UP Table 9: big level 8 = 1800 MHz, little level 4 = 1008 MHz.
    assert resolve_level(big, "8", "host") == (8, 1_800_000)
    assert resolve_level(little, "4", "host") == (4, 1_008_000)
    with pytest.raises(BoardError, match="out of range"):
        resolve_level(little, "7", "host")


def test_policy_found_without_symlinks(tmp_path: Path) -> None:
    # Only policyN/related_cpus tells which policy a core is in.
    board = host_board(rk3399(tmp_path, symlinks=False))
    assert board.processor("B").cores == (4, 5)
    assert board.processor("B").governor.path == "devices/system/cpu/cpufreq/policy4"  # type: ignore[union-attr]


def test_offline_cores_are_left_out(tmp_path: Path) -> None:
    rk3399(tmp_path)
    (tmp_path / "devices/system/cpu/online").write_text("0-2,4\n")
    board = host_board(tmp_path)
    assert board.processor("B").cores == (4,)
    assert board.processor("L").cores == (0, 1, 2)


def test_uniform_tree_is_one_cluster_b(tmp_path: Path) -> None:
    freqs = (1_000_000, 2_000_000, 3_000_000)
    # x86-style: one policy per core, identical limits.
    make_tree(tmp_path, "0-3", {c: ((c,), freqs) for c in range(4)})
    board = host_board(tmp_path)
    assert list(board.processors) == ["B"]
    b = board.processor("B")
    assert b.cores == (0, 1, 2, 3)
    assert b.freqs_khz == freqs
    assert b.extra["cpufreq_policies"] == tuple(
        f"devices/system/cpu/cpufreq/policy{c}" for c in range(4))


def test_no_scaling_table_means_no_levels(tmp_path: Path) -> None:
    make_tree(tmp_path, "0-1", {0: ((0, 1), None)})
    b = host_board(tmp_path).processor("B")
    assert b.freqs_khz == () and not b.has_dvfs
    with pytest.raises(BoardError, match="no DVFS levels"):
        resolve_level(b, "1", "host")


def test_no_cpufreq_at_all(tmp_path: Path) -> None:
    make_tree(tmp_path, "0-7", {})
    board = host_board(tmp_path)
    assert list(board.processors) == ["B"]
    assert board.processor("B").cores == tuple(range(8))
    assert board.processor("B").governor is None
    assert board.processor("B").freqs_khz == ()


def test_capacity_splits_clusters_without_cpufreq(tmp_path: Path) -> None:
    make_tree(tmp_path, "0-5", {}, capacity={0: 446, 1: 446, 2: 446, 3: 446, 4: 1024, 5: 1024})
    board = host_board(tmp_path)
    assert board.processor("B").cores == (4, 5)
    assert board.processor("L").cores == (0, 1, 2, 3)
    assert board.processor("B").governor is None


def test_three_clusters_map_fastest_and_slowest(tmp_path: Path) -> None:
    # QCS6490-like: 4 little, 3 big, 1 prime.
    make_tree(tmp_path, "0-7", {0: ((0, 1, 2, 3), (300000, 1958400)),
                                4: ((4, 5, 6), (691200, 2400000)),
                                7: ((7,), (806400, 2707200))})
    board = host_board(tmp_path)
    assert board.processor("B").cores == (7,)
    assert board.processor("L").cores == (0, 1, 2, 3)
    assert board.extra["unmapped_clusters"] == ["4-6"]


def test_missing_tree_is_a_board_error(tmp_path: Path) -> None:
    with pytest.raises(BoardError, match="no CPU topology"):
        read_clusters(tmp_path / "nope")


def test_this_machine() -> None:
    """The real /sys: B holds cores this process may use."""
    board = host_board()
    assert board.processor("B").cores
    online = set(parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text()))
    assert set(board.processor("B").cores) <= online
