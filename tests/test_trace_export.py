"""Chunked export of a captured trace (CSV and Parquet) against a whole-trace export.

The trace is a real capture: the virtual logger on a pty, read by the collector
into a trace directory (memory-mapped on load), with marker changes, a corrupt
frame and dropped frames (lost-frame gaps). The reference is the straightforward
export: every record in memory at once, one DataFrame, one ``to_csv``. Chunk
sizes are chosen so that chunk boundaries fall on the sample where a marker
changes, on the first sample after a gap, one sample off either, and so that
samples and edges span many chunks.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from profiler.power.clockmap import fit_clock_map
from profiler.power.collector import Collector
from profiler.power.export import export, export_files, record_chunks
from profiler.power.trace import SAMPLE_DTYPE, DeviceTrace
from profiler.sim.virtual_logger import VirtualLogger

RATE_HZ = 4000


def _power(t_s: np.ndarray, markers: np.ndarray) -> np.ndarray:
    return 1.5 + 0.75 * (markers & 1) + 0.25 * ((markers >> 1) & 1) + 0.05 * np.sin(40.0 * t_s)


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> DeviceTrace:
    """~1.2 s at 4 kS/s: ~40 marker changes, 1 corrupt and 3 dropped frames, clock fitted."""
    out = tmp_path_factory.mktemp("capture") / "trace"
    host_ns: list[int] = []
    levels: list[int] = []
    with VirtualLogger(_power, rate_hz=RATE_HZ) as vl:

        def toggle() -> None:
            for i in range(40):
                time.sleep(0.025)
                lv = (i + 1) % 4
                t0 = time.perf_counter_ns()
                vl.set_markers(lv)
                host_ns.append((t0 + time.perf_counter_ns()) // 2)
                levels.append(lv)

        done: set[str] = set()

        def progress(elapsed_s: float, counters: object) -> None:
            if elapsed_s >= 0.3 and "corrupt" not in done:
                done.add("corrupt")
                vl.corrupt_frames(1)
            if elapsed_s >= 0.6 and "drop" not in done:
                done.add("drop")
                vl.drop_frames(2)
            if elapsed_s >= 1.0 and "drop2" not in done:
                done.add("drop2")
                vl.drop_frames(1)

        thread = threading.Thread(target=toggle, daemon=True)
        with Collector(vl.port, out_dir=out) as col:
            col.open()
            thread.start()
            trace = col.record(1.2, progress=progress, tick_s=0.05)
        thread.join()
    fit = fit_clock_map(trace.edges["t_us"], host_ns, device_levels=trace.edges["markers"],
                        host_levels=levels, tol_ns=10_000_000)
    trace = trace.with_clock(fit.clock)
    # what the test needs of the capture
    assert isinstance(trace.samples, np.memmap) and isinstance(trace.edges, np.memmap)
    assert trace.gaps.size >= 2 and trace.counters.lost_frames >= 3
    assert trace.edges.size >= 30
    return trace


def reference_csv(trace: DeviceTrace, path: Path) -> None:
    """The straightforward export: all records in memory, one DataFrame, one to_csv."""
    s = np.array(trace.samples)
    e = np.array(trace.edges)
    info = trace.info
    assert info is not None
    cur, bus = info.current_a(s["current"]), info.bus_v(s["bus"])
    host = (trace.clock.to_host_ns(s["t_us"]) if trace.clock
            else pd.array([pd.NA] * s.size, dtype="Int64"))
    pd.DataFrame({"t_us": s["t_us"], "host_ns": host, "current_a": cur, "bus_v": bus,
                  "power_w": cur * bus, "markers": s["markers"]}).to_csv(
        path, index=False, float_format="%.9g", na_rep="")
    edges = export_files(path).edges
    host_e = trace.clock.to_host_ns(e["t_us"]) if trace.clock else None
    with open(edges, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_us", "host_ns", "markers", "changed"])
        for i, row in enumerate(e.tolist()):
            w.writerow([row[0], "" if host_e is None else int(host_e[i]), row[1], row[2]])


def boundary_chunks(trace: DeviceTrace) -> dict[str, int]:
    """Chunk sizes whose first boundary lands on a marker change or a lost-frame gap."""
    t = np.asarray(trace.samples["t_us"])
    mk = np.asarray(trace.samples["markers"])
    change = int(np.flatnonzero(np.diff(mk) != 0)[0]) + 1  # first sample with the new level
    after_gap = int(np.searchsorted(t, trace.gaps["t_after_us"][0]))  # first sample after it
    assert mk[change] != mk[change - 1]
    assert t[after_gap] == trace.gaps["t_after_us"][0]
    n = t.size
    return {"on_marker_change": change, "before_marker_change": change - 1,
            "after_marker_change": change + 1, "on_gap": after_gap, "before_gap": after_gap - 1,
            "tiny": 7, "thousand": 1000, "all_but_one": n - 1, "all": n, "more_than_all": n + 5}


CHUNK_NAMES = ["on_marker_change", "before_marker_change", "after_marker_change", "on_gap",
               "before_gap", "tiny", "thousand", "all_but_one", "all", "more_than_all"]


@pytest.mark.parametrize("name", CHUNK_NAMES)
def test_chunked_csv_is_byte_identical_to_whole_trace_export(
    captured: DeviceTrace, tmp_path: Path, name: str
) -> None:
    rows = boundary_chunks(captured)[name]
    files = export(captured, tmp_path / "chunked.csv", rows)
    reference_csv(captured, tmp_path / "whole.csv")
    assert [f.name for f in files] == ["chunked.csv", "chunked.edges.csv", "chunked.json"]
    assert (tmp_path / "chunked.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    assert (tmp_path / "chunked.edges.csv").read_bytes() == \
        (tmp_path / "whole.edges.csv").read_bytes()
    n = captured.samples.size
    assert -(-n // rows) >= (2 if rows < n else 1)  # several chunks unless the size says not
    s = pd.read_csv(tmp_path / "chunked.csv")
    assert len(s) == n and s["host_ns"].notna().all()
    meta = json.loads((tmp_path / "chunked.json").read_text())
    assert meta["samples"] == n and len(meta["gaps"]) == captured.gaps.size
    assert meta["files"] == {"samples": "chunked.csv", "edges": "chunked.edges.csv"}


def test_without_clock_and_in_memory_the_same_bytes(captured: DeviceTrace, tmp_path: Path) -> None:
    bare = captured.with_clock(None)
    export(bare, tmp_path / "chunked.csv", 333)
    reference_csv(bare, tmp_path / "whole.csv")
    assert (tmp_path / "chunked.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    assert (tmp_path / "chunked.edges.csv").read_bytes() == \
        (tmp_path / "whole.edges.csv").read_bytes()
    assert pd.read_csv(tmp_path / "chunked.csv")["host_ns"].isna().all()
    # the same trace held in memory (not memory-mapped) takes the slicing path: same bytes
    mem = replace(captured, samples=np.array(captured.samples), edges=np.array(captured.edges))
    export(mem, tmp_path / "mem.csv", 333)
    reference_csv(captured, tmp_path / "ref.csv")
    assert (tmp_path / "mem.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()


def test_empty_trace_writes_headers(captured: DeviceTrace, tmp_path: Path) -> None:
    empty = DeviceTrace(info=captured.info)
    export(empty, tmp_path / "e.csv", 10)
    reference_csv(empty, tmp_path / "w.csv")
    assert (tmp_path / "e.csv").read_bytes() == (tmp_path / "w.csv").read_bytes() == \
        b"t_us,host_ns,current_a,bus_v,power_w,markers\n"
    export(empty, tmp_path / "e.parquet", 10)
    assert pq.read_table(tmp_path / "e.parquet").num_rows == 0


@pytest.mark.parametrize("name", ["on_marker_change", "on_gap", "tiny", "all"])
def test_parquet_round_trip_is_exact_with_one_row_group_per_chunk(
    captured: DeviceTrace, tmp_path: Path, name: str
) -> None:
    rows = boundary_chunks(captured)[name]
    files = export(captured, tmp_path / "t.parquet", rows)
    assert [f.name for f in files] == ["t.parquet", "t.edges.parquet", "t.json"]
    s = np.array(captured.samples)
    info = captured.info
    assert info is not None and captured.clock is not None
    pf = pq.ParquetFile(tmp_path / "t.parquet")
    assert pf.metadata.num_row_groups == -(-s.size // rows)
    got = pf.read().to_pandas()
    assert list(got.columns) == ["t_us", "host_ns", "current_a", "bus_v", "power_w", "markers"]
    cur, bus = info.current_a(s["current"]), info.bus_v(s["bus"])
    for col, want in (("t_us", s["t_us"]), ("host_ns", captured.clock.to_host_ns(s["t_us"])),
                      ("current_a", cur), ("bus_v", bus), ("power_w", cur * bus),
                      ("markers", s["markers"])):
        assert got[col].dtype == want.dtype, col
        assert np.array_equal(got[col].to_numpy(), want), col
    e = np.array(captured.edges)
    ge = pq.read_table(tmp_path / "t.edges.parquet").to_pandas()
    assert ge["t_us"].tolist() == e["t_us"].tolist()
    assert ge["host_ns"].tolist() == captured.clock.to_host_ns(e["t_us"]).tolist()
    assert ge["markers"].tolist() == e["markers"].tolist()
    assert ge["changed"].tolist() == e["changed"].tolist()
    meta = json.loads((tmp_path / "t.json").read_text())
    assert meta["files"] == {"samples": "t.parquet", "edges": "t.edges.parquet"}
    # the same numbers as the CSV, to its 9 significant digits
    export(captured, tmp_path / "c.csv")
    c = pd.read_csv(tmp_path / "c.csv")
    assert np.allclose(c["power_w"], got["power_w"], rtol=1e-8, atol=0)
    assert c["host_ns"].tolist() == got["host_ns"].tolist()


def test_parquet_without_clock_has_null_host_times(captured: DeviceTrace, tmp_path: Path) -> None:
    export(captured.with_clock(None), tmp_path / "t.pq", 500)
    t = pq.read_table(tmp_path / "t.pq")
    assert t.column("host_ns").null_count == t.num_rows == captured.samples.size
    assert (tmp_path / "t.edges.parquet").exists() and (tmp_path / "t.json").exists()


def test_record_chunks_reads_a_memmap_in_order_and_a_shrunk_file_stops(tmp_path: Path) -> None:
    rec = np.zeros(1003, SAMPLE_DTYPE)
    rec["t_us"] = np.arange(1003) * 50
    rec["markers"] = np.arange(1003) % 3
    DeviceTrace(info=None, samples=rec).save(tmp_path / "t")
    loaded = DeviceTrace.load(tmp_path / "t")
    chunks = list(record_chunks(loaded.samples, 100))
    assert [c.size for c in chunks] == [100] * 10 + [3]
    assert not any(isinstance(c, np.memmap) for c in chunks)  # plain reads, not views
    assert np.array_equal(np.concatenate(chunks), rec)
    with pytest.raises(ValueError, match="1 or more"):
        list(record_chunks(rec, 0))
    # cut short under a loaded trace (through the map this would be SIGBUS): the rest is read
    with open(tmp_path / "t" / "samples.bin", "r+b") as f:
        f.truncate(250 * SAMPLE_DTYPE.itemsize)
    assert [c.size for c in record_chunks(loaded.samples, 100)] == [100, 100, 50]


# The old export read samples through the memory map: every page it touched stayed
# resident, so peak RSS grew by the samples file's size (13 bytes a sample). The
# child resets its RSS high-water mark (clear_refs 5) after a warm-up export and
# prints how far the peak rose above the RSS it had before the big export.
_MEASURE = """
import sys
from pathlib import Path
from profiler.power.export import export
from profiler.power.trace import DeviceTrace
def kb(key):
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(key))
    return int(line.split()[1])
small, big, out, fmt = sys.argv[1:]
export(DeviceTrace.load(small), out + "/small." + fmt, 50_000)  # imports, warm-up
trace = DeviceTrace.load(big)
Path("/proc/self/clear_refs").write_text("5")
before = kb("VmRSS:")
export(trace, out + "/big." + fmt, 50_000)
print((kb("VmHWM:") - before) / 1024)
"""


@pytest.mark.slow
def test_export_peak_memory_does_not_grow_with_the_trace(captured: DeviceTrace, tmp_path: Path) -> None:
    def write(n: int, path: Path) -> None:
        rec = np.zeros(n, SAMPLE_DTYPE)
        rec["t_us"] = np.arange(n, dtype=np.int64) * 50
        rec["current"] = (np.arange(n) * 7919) % 30000
        rec["bus"] = 4000
        rec["markers"] = (np.arange(n) // 1000) % 2
        DeviceTrace(info=captured.info, samples=rec, edges=captured.edges[:0]).save(path)

    write(200_000, tmp_path / "small")
    write(3_000_000, tmp_path / "big")  # 39 MB of samples
    assert (tmp_path / "big" / "samples.bin").stat().st_size == 39_000_000
    for fmt in ("parquet", "csv"):
        r = subprocess.run([sys.executable, "-c", _MEASURE, str(tmp_path / "small"),
                            str(tmp_path / "big"), str(tmp_path), fmt],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        grew_mb = float(r.stdout)
        # a chunk of 50,000 rows is ~2 MB as columns; pandas' CSV formatting adds a few MB
        # (measured: 3-5 MB; reading through the map instead: 39 MB more)
        assert grew_mb < 15, f"{fmt}: peak RSS rose {grew_mb:.1f} MB exporting 39 MB of samples"
    assert pq.read_metadata(tmp_path / "big.parquet").num_rows == 3_000_000
    assert (tmp_path / "big.csv").stat().st_size > 3_000_000 * 20
