"""The CPU's last-level cache from a sysfs tree (a fake one with known sizes, and this
machine's), and the evictor's reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.measure.cpu_cache import (
    LINE_BYTES,
    Evictor,
    cached_bytes,
    last_level_cache_bytes,
    usable_cache_bytes,
)


def fake_caches(root: Path, core: int, caches: list[tuple[int, str, str]]) -> Path:
    """``caches``: (level, type, size text) per index, as the kernel lists them."""
    for i, (level, kind, size) in enumerate(caches):
        d = root / "devices/system/cpu" / f"cpu{core}" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_the_highest_data_or_unified_level_is_the_last_level_cache(tmp_path: Path) -> None:
    root = fake_caches(tmp_path, 3, [(1, "Data", "48K"), (1, "Instruction", "32K"),
                                     (2, "Unified", "1024K"), (3, "Unified", "32768K")])
    assert last_level_cache_bytes(3, root) == 32 << 20
    # another core lists nothing: unknown, not a guess
    assert last_level_cache_bytes(0, root) is None
    assert last_level_cache_bytes(0, tmp_path / "nowhere") is None


def test_sizes_in_every_unit_and_instruction_caches_ignored(tmp_path: Path) -> None:
    root = fake_caches(tmp_path, 0, [(1, "Data", "32K"), (2, "Unified", "2M"),
                                     (3, "Instruction", "64M")])
    assert last_level_cache_bytes(0, root) == 2 << 20
    root2 = fake_caches(tmp_path / "b", 0, [(1, "Data", "65536")])
    assert last_level_cache_bytes(0, root2) == 65536


def test_an_unreadable_index_is_skipped(tmp_path: Path) -> None:
    root = fake_caches(tmp_path, 0, [(2, "Unified", "512K"), (3, "Unified", "lots")])
    assert last_level_cache_bytes(0, root) == 512 << 10


def test_this_machine_lists_a_plausible_cache_or_none() -> None:
    got = last_level_cache_bytes(0, Path("/sys"))
    assert got is None or 16 << 10 <= got <= 4 << 30


def test_the_evictor_reads_every_line_of_its_buffer_once() -> None:
    """Every value is 1, so a pass's sum counts the lines it read: all of them, once."""
    ev = Evictor(1 << 20)
    assert ev.nbytes == 1 << 20
    assert ev() == (1 << 20) // LINE_BYTES and ev() == (1 << 20) // LINE_BYTES
    assert ev.calls == 2
    odd = Evictor(1000)  # not a whole number of lines: the last partial line is read too
    assert odd() == -(-1000 // 8 // (LINE_BYTES // 8))
    with pytest.raises(ValueError, match="displaces nothing"):
        Evictor(32)


MIB = 1 << 20


def test_the_usable_cache_is_the_largest_size_of_a_run_read_faster_than_memory() -> None:
    """The figures of this project's 2-core VM (GB/s by buffer, docs/fused.md): cached up
    to 32 MiB, memory at 9.5; a size read fast after a slow one does not count (a cache
    holds every size below its own); nothing fast is 0 sizes."""
    vm = {1 * MIB: 29.8, 2 * MIB: 23.2, 4 * MIB: 17.6, 8 * MIB: 17.1, 16 * MIB: 18.5,
          32 * MIB: 14.3, 64 * MIB: 9.9, 128 * MIB: 9.4}
    assert cached_bytes(vm, 9.5) == 32 * MIB
    assert cached_bytes({MIB: 30.0, 2 * MIB: 10.0, 4 * MIB: 20.0}, 9.5) == MIB
    assert cached_bytes({MIB: 10.0}, 9.5) is None
    assert cached_bytes(vm, 9.5, speedup=2.0) == 2 * MIB  # 4 MiB: 17.6 < 19


def test_this_core_reads_a_listed_2_mib_from_cache() -> None:
    """Measured on this machine: a listed cache of 2 MiB is wholly usable wherever the
    cores have 4 MiB or more (the suite's machines: checked against sysfs first); under
    1 MiB there is nothing to probe."""
    here = last_level_cache_bytes(0, Path("/sys"))
    if here is None or here < 4 * MIB:
        pytest.skip(f"this machine's last-level cache ({here} bytes) is under 4 MiB")
    assert usable_cache_bytes(2 * MIB) == 2 * MIB
    assert usable_cache_bytes(MIB // 2) is None
