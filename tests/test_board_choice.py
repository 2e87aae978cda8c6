"""One door to a board (`profiler.platform.choose_board`): `sweep --board host` offers G
wherever `layers --board host -p G` can run it, no command or benchmark loads boards
around it, and a board chosen there can be driven in a fresh process (the simulated
board plugs in through it; no factory imports it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from fake_host import bare_vm

from profiler.cli import build_parser
from profiler.cli.common.plumbing import choose_board as command_board
from profiler.errors import BoardError

REPO = Path(__file__).resolve().parent.parent
FAKE_GPU = Path("/nowhere/libLiteRtWebGpuAccelerator.so")


class Planned(Exception):
    """Raised where the sweep would start measuring: what it planned is known by then."""


def fake_probe(monkeypatch: pytest.MonkeyPatch, present: bool) -> None:
    """LiteRT's GPU accelerator library: there, or not (the probe `with_accelerators` asks)."""
    monkeypatch.setattr("profiler.executors.factory.litert_gpu_library",
                        lambda: FAKE_GPU if present else None)


def sweep_plan(monkeypatch: pytest.MonkeyPatch, sys_root: Path, processors: str) -> list[str]:
    """The processors `coupprof sweep --board host --processors ...` plans, as the command
    runs up to its first measurement."""
    planned: list[str] = []

    class StopAtSweep:
        def __init__(self, board: object, model: Path, pairs: list, *a: object, **kw: object):
            planned.extend(p.processor for p in pairs)
            raise Planned

    monkeypatch.setattr("profiler.sweep.run.Sweep", StopAtSweep)
    argv = ["sweep", "--board", "host", "--sysfs-root", str(sys_root), "--processors",
            processors, "--freqs", "current", "--power", "none"]
    args = build_parser(argv).parse_args(argv)
    with pytest.raises(Planned):
        args.func(args)
    return planned


def layers_can_run_g(sys_root: Path) -> bool:
    """Whether `coupprof layers --board host -p G` finds G: the board its run gets."""
    argv = ["layers", "--board", "host", "--sysfs-root", str(sys_root), "-p", "G"]
    args = build_parser(argv).parse_args(argv)
    return "G" in command_board(args).processors


@pytest.mark.parametrize("gpu", [True, False])
def test_sweep_offers_g_on_host_exactly_where_layers_can_run_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: bool) -> None:
    sys_root = bare_vm(tmp_path)
    fake_probe(monkeypatch, gpu)
    assert layers_can_run_g(sys_root) is gpu
    if gpu:
        assert sweep_plan(monkeypatch, sys_root, "B,G") == ["B", "G"]
    else:
        with pytest.raises(BoardError, match="G"):
            sweep_plan(monkeypatch, sys_root, "B,G")
    # Without --processors a sweep keeps to what is surely there, as before.
    assert sweep_plan(monkeypatch, sys_root, "B") == ["B"]


def test_g_is_added_only_on_host_and_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from profiler.boards.profiles import load_board
    from profiler.platform import choose_board

    fake_probe(monkeypatch, True)
    g = choose_board("host", letters=["g"]).processor("G")
    assert g.accelerator == "gpu" and g.host == "B"
    assert "G" not in choose_board("host", letters=["B"]).processors
    assert choose_board("sim") == load_board("sim")  # other boards: their profiles as written


def _board_loads(path: Path) -> list[str]:
    """Calls of the board loaders in a file (`name:line`)."""
    tree = ast.parse(path.read_text(), str(path))
    names = {"load_board", "select_board", "with_accelerators"}
    return [f"{path.relative_to(REPO)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module in (
                "profiler.boards.profiles", "profiler.executors", "profiler.executors.factory")
            and any(a.name in names for a in node.names)]


def test_no_command_library_module_or_benchmark_loads_boards_around_the_chooser() -> None:
    files = [*(REPO / "profiler").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]
    # where the loaders are defined (and re-exported), and the chooser itself
    inside = [REPO / "profiler" / d for d in ("boards", "executors", "platform")]
    found = [hit for f in files if not any(f.is_relative_to(d) for d in inside)
             for hit in _board_loads(f)]
    assert not found, "boards loaded around profiler.platform.choose_board: " + ", ".join(found)


def test_a_fresh_process_drives_the_sim_board_through_the_chooser_only() -> None:
    """No factory imports the sim: without the chooser its parts are not there, with it
    they are (a Dask worker or a script starts with neither)."""
    code = """
import sys
from governors import make_governor
from profiler.boards.profiles import load_board
from profiler.errors import BoardError, BadInputError
from profiler.executors import make_executor
from profiler.power.sources import open_power_source
board = load_board("sim")  # a profile reads without the sim
assert not [m for m in sys.modules if m.startswith("profiler.sim")]
for make in (lambda: make_governor(board, board.processor("B")),
             lambda: make_executor(board, "B"), lambda: open_power_source("sim")):
    try:
        make()
    except (BoardError, BadInputError) as err:
        print("without:", err.message, "|", err.fix)
from profiler.platform import choose_board
board = choose_board("sim")
print("governor:", make_governor(board, board.processor("B")).kind)
print("executor:", type(make_executor(board, "B")).__name__)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    without = [line for line in r.stdout.splitlines() if line.startswith("without:")]
    assert len(without) == 3, r.stdout
    assert all("choose_board" in line for line in without[:2]), without
    assert "unknown power source 'sim'" in without[2]
    assert "governor: sim" in r.stdout and "executor: CpuExecutor" in r.stdout
