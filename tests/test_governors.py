"""Governors against fake sysfs trees laid out like the real boards.

The fake kernel (tests/fake_sysfs.py) is an independent model of what the kernel does
after each write; the governors are the production code writing real files.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest
from fake_sysfs import BUILDERS, FakeKernel, build, snapshot

from governors import RestoreGuard, SysfsIO, Terminated, make_governor
from governors.base import write_limits
from governors.cpufreq import CpufreqGovernor
from governors.devfreq import DevfreqGovernor
from governors.none import NoneGovernor
from governors.vendor import KgslGovernor, MpgpuGovernor
from profiler.boards.profiles import load_board
from profiler.errors import BoardError, GovernorError, HardwareError, PermissionDeniedError
from profiler.sim.governor import SimGovernor, SimTree

B_POLICY = "devices/system/cpu/cpufreq/policy4"


def governors_of(board_name: str, tree, on_write=None):
    board = load_board(board_name)
    out = []
    for proc in board.processors.values():
        if proc.governor is None:
            continue
        gov = make_governor(board, proc, tree.sys)
        gov.io.on_write = on_write or tree.kernel.on_write
        out.append(gov)
    return board, out


@pytest.mark.parametrize("board_name", sorted(BUILDERS))
def test_every_profile_sets_every_level_on_its_tree_and_restores(board_name, tmp_path):
    tree = build(board_name, tmp_path)
    before = snapshot(tmp_path)
    board, govs = governors_of(board_name, tree)
    assert govs, f"{board_name} has no governed processor"
    expected_kind = {"cpu": {"cpufreq"}, "gpu": {"devfreq", "kgsl", "mpgpu"}}
    with RestoreGuard(govs):
        for gov in govs:
            assert gov.kind in expected_kind[gov.proc.kind]
            for level, freq in enumerate(gov.proc.freqs_khz, 1):
                res = gov.set_level(level, settle_s=0)
                assert res.ok, res.warning
                assert res.effective_khz is not None
                # The fake kernel only runs frequencies the board offers, so a profile
                # level missing from the board's table reads back as something else.
                assert abs(res.effective_khz - freq) <= 1000, (gov.letter, level)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("board_name", sorted(BUILDERS))
def test_detection_finds_each_board_from_its_device_tree(board_name, tmp_path):
    from profiler.boards.profiles import detect_board, read_model_string

    tree = build(board_name, tmp_path)
    assert read_model_string(tree.sys) == tree.model
    assert detect_board(tree.sys) == board_name


def test_cpufreq_userspace_writes_setspeed_and_restores_schedutil(tmp_path):
    tree = build("rk3399pro", tmp_path)
    pol = tree.sys / B_POLICY
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("B"), tree.sys)
    gov.io.on_write = tree.kernel.on_write
    with RestoreGuard([gov]):
        res = gov.set_level(3, settle_s=0)
        assert gov.method == "userspace"
        assert (pol / "scaling_governor").read_text() == "userspace\n"
        assert (pol / "scaling_setspeed").read_text() == "816000\n"
        assert res.effective_khz == 816000 and res.level == 3
        # limits untouched: userspace needs no clamping inside [408, 1800] MHz
        assert (pol / "scaling_min_freq").read_text() == "408000\n"
        assert (pol / "scaling_max_freq").read_text() == "1800000\n"
    assert snapshot(tmp_path) == before
    assert (pol / "scaling_cur_freq").read_text() == "1200000\n"


def test_cpufreq_clamps_when_userspace_is_not_offered(tmp_path):
    tree = build("rk3399pro", tmp_path)
    pol = tree.sys / B_POLICY
    (pol / "scaling_available_governors").write_text("ondemand performance schedutil \n")
    tree.kernel = FakeKernel(tree.sys)
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("B"), tree.sys)
    gov.io.on_write = tree.kernel.on_write
    with RestoreGuard([gov]):
        res = gov.set_khz(1608000, settle_s=0)
        assert gov.method == "clamp"
        assert (pol / "scaling_min_freq").read_text() == "1608000\n"
        assert (pol / "scaling_max_freq").read_text() == "1608000\n"
        assert (pol / "scaling_governor").read_text() == "schedutil\n"
        assert res.ok and res.effective_khz == 1608000
    assert snapshot(tmp_path) == before


def test_userspace_widens_user_limits_only_when_needed(tmp_path):
    """A user's max of 1200 MHz would clamp setspeed 1800: the limit is widened, then restored."""
    tree = build("rk3399pro", tmp_path)
    pol = tree.sys / B_POLICY
    (pol / "scaling_max_freq").write_text("1200000\n")
    tree.kernel = FakeKernel(tree.sys)
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("B"), tree.sys)
    gov.io.on_write = tree.kernel.on_write
    with RestoreGuard([gov]):
        assert gov.set_khz(1800000, settle_s=0).effective_khz == 1800000
        assert (pol / "scaling_max_freq").read_text() == "1800000\n"
    assert snapshot(tmp_path) == before


def _invariant_hook(kernel: FakeKernel, lo_file: Path, hi_file: Path, lower_is_lo: bool = True):
    """An on_write hook that fails the test whenever a write leaves min above max."""
    seen: list[tuple[int, int]] = []

    def hook(path: Path, value: str) -> None:
        lo, hi = int(lo_file.read_text()), int(hi_file.read_text())
        seen.append((lo, hi))
        ok = lo <= hi if lower_is_lo else lo >= hi
        assert ok, f"after writing {value} to {path.name}: limits {lo}/{hi} are crossed"
        kernel.on_write(path, value)

    return hook, seen


def test_clamp_order_never_crosses_min_and_max(tmp_path):
    tree = build("rk3399pro", tmp_path)
    pol = tree.sys / B_POLICY
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    proc = board.processor("B")
    hook, seen = _invariant_hook(tree.kernel, pol / "scaling_min_freq", pol / "scaling_max_freq")
    gov = CpufreqGovernor(proc, SysfsIO(tree.sys, on_write=hook), B_POLICY, method="clamp")
    freqs = proc.freqs_khz
    # every ordered pair of levels, in both directions, then restore from the top level
    with RestoreGuard([gov]):
        for a in freqs:
            for b in freqs:
                gov.request_khz(a)
                gov.request_khz(b)
                assert (pol / "scaling_min_freq").read_text() == f"{b}\n"
                assert (pol / "scaling_max_freq").read_text() == f"{b}\n"
        gov.request_khz(freqs[-1])
    assert len(seen) > 2 * len(freqs) ** 2 - 10
    assert snapshot(tmp_path) == before


def test_restore_order_from_a_pin_below_the_original_min(tmp_path):
    """Original limits 1008-1800, pinned at 408: restoring min first would cross (1008 > 408)."""
    tree = build("rk3399pro", tmp_path)
    pol = tree.sys / B_POLICY
    (pol / "scaling_min_freq").write_text("1008000\n")
    tree.kernel = FakeKernel(tree.sys)
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    hook, _ = _invariant_hook(tree.kernel, pol / "scaling_min_freq", pol / "scaling_max_freq")
    gov = CpufreqGovernor(board.processor("B"), SysfsIO(tree.sys, on_write=hook), B_POLICY,
                          method="clamp")
    with RestoreGuard([gov]):
        gov.set_khz(408000, settle_s=0)
    assert snapshot(tmp_path) == before


def test_write_limits_is_safe_for_every_transition():
    levels = [1, 2, 3, 4, 5]
    pairs = [(lo, hi) for lo in levels for hi in levels if lo <= hi]
    for cur in pairs:
        for new in pairs:
            state = list(cur)

            def w_lo(v, state=state):
                state[0] = v
                assert state[0] <= state[1]

            def w_hi(v, state=state):
                state[1] = v
                assert state[0] <= state[1]

            write_limits(w_lo, w_hi, cur[0], cur[1], new[0], new[1])
            assert tuple(state) == new


def test_devfreq_userspace_set_freq(tmp_path):
    tree = build("rk3399pro", tmp_path)
    gpu = tree.sys / "class/devfreq/ff9a0000.gpu"
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("G"), tree.sys)
    assert isinstance(gov, DevfreqGovernor)
    gov.io.on_write = tree.kernel.on_write
    with RestoreGuard([gov]):
        res = gov.set_level(4, settle_s=0)
        assert gov.method == "userspace"
        assert (gpu / "userspace/set_freq").read_text() == "600000000\n"
        assert res.effective_khz == 600000  # ARM-CO-UP: GPU level 4 = 600 MHz
    assert not (gpu / "userspace").exists()
    assert snapshot(tmp_path) == before


def test_devfreq_falls_back_to_clamping_when_set_freq_never_appears(tmp_path):
    tree = build("rk3399pro", tmp_path)
    gpu = tree.sys / "class/devfreq/ff9a0000.gpu"
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("G"), tree.sys)
    gov.io.on_write = None  # nobody creates userspace/: like a kernel without the group
    with RestoreGuard([gov]):
        res = gov.set_khz(300000, settle_s=0.002)
        assert gov.method == "clamp"
        assert any("set_freq did not appear" in n for n in gov.notes)
        assert (gpu / "min_freq").read_text() == "300000000\n"
        assert (gpu / "max_freq").read_text() == "300000000\n"
        assert (gpu / "governor").read_text() == "simple_ondemand\n"
        assert not res.ok and "cur_freq reads 400 MHz" in res.warning
    assert snapshot(tmp_path) == before


def test_kgsl_pins_both_power_levels_in_a_safe_order(tmp_path):
    tree = build("qcs6490", tmp_path)
    kg = tree.sys / "class/kgsl/kgsl-3d0"
    before = snapshot(tmp_path)
    board = load_board("qcs6490")
    proc = board.processor("G")
    # kgsl: level numbers grow as frequency falls, so max_pwrlevel <= min_pwrlevel always.
    hook, seen = _invariant_hook(tree.kernel, kg / "max_pwrlevel", kg / "min_pwrlevel")
    gov = KgslGovernor(proc, SysfsIO(tree.sys, on_write=hook), "class/kgsl/kgsl-3d0")
    with RestoreGuard([gov]):
        for f in (*proc.freqs_khz, *reversed(proc.freqs_khz), proc.freqs_khz[0],
                  proc.freqs_khz[-1]):
            res = gov.set_khz(f, settle_s=0)
            lvl = [812000, 700000, 608000, 550000, 450000, 315000].index(f)
            assert (kg / "max_pwrlevel").read_text() == f"{lvl}\n"
            assert (kg / "min_pwrlevel").read_text() == f"{lvl}\n"
            assert res.effective_khz == f
    assert seen
    assert snapshot(tmp_path) == before


def test_kgsl_rejects_a_frequency_the_driver_does_not_list(tmp_path):
    tree = build("qcs6490", tmp_path)
    board = load_board("qcs6490")
    gov = KgslGovernor(board.processor("G"), SysfsIO(tree.sys), "class/kgsl/kgsl-3d0")
    with pytest.raises(GovernorError, match=r"900 MHz is not a power level in .*gpu_available"):
        gov.request_khz(900000)


def test_mpgpu_clamps_indices_and_reads_mhz(tmp_path):
    tree = build("khadas-vim3", tmp_path)
    mp = tree.sys / "class/mpgpu"
    before = snapshot(tmp_path)
    board = load_board("khadas-vim3")
    proc = board.processor("G")
    hook, _ = _invariant_hook(tree.kernel, mp / "min_freq", mp / "max_freq")
    gov = MpgpuGovernor(proc, SysfsIO(tree.sys, on_write=hook), "class/mpgpu")
    with RestoreGuard([gov]):
        res = gov.set_level(2, settle_s=0)
        assert (mp / "min_freq").read_text() == "1\n" and (mp / "max_freq").read_text() == "1\n"
        assert res.effective_khz == 400000 and res.ok
        res = gov.set_level(1, settle_s=0)
        assert res.effective_khz == 285000 and res.ok  # 285.714 MHz reads as whole MHz
    assert snapshot(tmp_path) == before


def test_readback_mismatch_is_reported_not_silent(tmp_path):
    tree = build("rk3399pro", tmp_path)
    pol = tree.sys / B_POLICY
    board = load_board("rk3399pro")

    def thermal_cap(path, value):  # a kernel whose thermal limit holds 1008 MHz
        tree.kernel.on_write(path, value)
        for name in ("scaling_cur_freq", "cpuinfo_cur_freq"):
            (pol / name).write_text("1008000\n")

    gov = make_governor(board, board.processor("B"), tree.sys)
    gov.io.on_write = thermal_cap
    with RestoreGuard([gov]):
        res = gov.set_level(8, settle_s=0.003)
    assert not res.ok
    assert res.requested_khz == 1800000 and res.effective_khz == 1008000
    assert "requested 1800 MHz" in res.warning and "reads 1008 MHz" in res.warning


def test_per_layer_requests_only_write_on_change(tmp_path):
    tree = build("rk3399pro", tmp_path)
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("B"), tree.sys)
    gov.io.on_write = tree.kernel.on_write
    with RestoreGuard([gov]):
        gov.request_khz(600000)
        n = len(tree.kernel.writes)
        gov.request_khz(600000)
        assert len(tree.kernel.writes) == n
        gov.request_khz(1416000)
        assert tree.kernel.writes[-1] == (f"{B_POLICY}/scaling_setspeed", "1416000")
    assert ("devices/system/cpu/cpufreq/policy4/scaling_governor", "schedutil") \
        in tree.kernel.writes


def test_missing_governor_directory_names_the_path(tmp_path):
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("G"), tmp_path / "sys")
    guard = RestoreGuard([gov])
    with pytest.raises(GovernorError, match=r"ff9a0000\.gpu does not exist.*--board"):
        guard.__enter__()
    assert signal.getsignal(signal.SIGTERM) != guard._handler  # handlers put back


def test_exception_inside_the_guard_restores(tmp_path):
    tree = build("rk3399pro", tmp_path)
    before = snapshot(tmp_path)
    _, govs = governors_of("rk3399pro", tree)
    with pytest.raises(ZeroDivisionError), RestoreGuard(govs):
        for gov in govs:
            gov.set_level(1, settle_s=0)
        1 / 0  # noqa: B018
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("sig,exc", [(signal.SIGINT, KeyboardInterrupt),
                                     (signal.SIGTERM, Terminated)])
def test_signal_inside_the_guard_restores_and_raises(tmp_path, sig, exc):
    tree = build("rk3399pro", tmp_path)
    before = snapshot(tmp_path)
    _, govs = governors_of("rk3399pro", tree)
    old = signal.getsignal(sig)
    with pytest.raises(exc) as info, RestoreGuard(govs):
        for gov in govs:
            gov.set_level(2, settle_s=0)
        os.kill(os.getpid(), sig)
        for _ in range(1000):
            pass
    assert snapshot(tmp_path) == before
    assert signal.getsignal(sig) is old  # the handler was put back
    if exc is Terminated:
        assert info.value.code == 128 + sig


def test_permission_error_names_file_and_fix(tmp_path):
    """A write the OS refuses: as root, drop to an unprivileged euid for the write."""
    base = Path(tempfile.mkdtemp(prefix="coupprof-perm-"))
    try:
        base.chmod(0o755)
        tree = build("rk3399pro", base)
        target = tree.sys / B_POLICY / "scaling_governor"
        for p in [*base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o444)
        board = load_board("rk3399pro")
        gov = make_governor(board, board.processor("B"), tree.sys)
        uid = os.geteuid()
        if uid == 0:
            os.seteuid(65534)
        try:
            with pytest.raises(PermissionDeniedError) as info, RestoreGuard([gov]):
                gov.set_level(3, settle_s=0)
        finally:
            if uid == 0:
                os.seteuid(0)
        msg = str(info.value)
        assert str(target) in msg
        assert "run as root" in msg and "grant write access" in msg
        assert info.value.exit_code == 3
    finally:
        for p in [base, *base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o755)
        import shutil

        shutil.rmtree(base)


def test_a_directory_where_a_file_should_be_is_a_hardware_error(tmp_path):
    tree = build("rk3399pro", tmp_path)
    setspeed = tree.sys / B_POLICY / "scaling_setspeed"
    setspeed.unlink()
    setspeed.mkdir()
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("B"), tree.sys)
    with pytest.raises(HardwareError, match="scaling_setspeed"), RestoreGuard([gov]):
        gov.request_khz(816000)


def test_none_governor_writes_nothing_and_says_so(tmp_path):
    tree = build("rk3399pro", tmp_path)
    before = snapshot(tmp_path)
    board = load_board("rk3399pro")
    gov = make_governor(board, board.processor("B"), tree.sys, kind="none")
    assert isinstance(gov, NoneGovernor)
    with RestoreGuard([gov]):
        res = gov.set_level(3)
    assert not res.ok and "not set" in res.warning and res.effective_khz is None
    assert snapshot(tmp_path) == before


class StepClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_sim_governor_writes_a_real_tree_and_models_the_delay(tmp_path):
    from profiler.sim import model as sim_model

    board = load_board("sim")
    clock = StepClock()
    tree = SimTree(board, root=tmp_path, clock_ns=clock)
    before = snapshot(tmp_path)
    b = board.processor("B")
    gov = make_governor(board, b, sim_tree=tree)
    assert isinstance(gov, SimGovernor)
    pol = tmp_path / B_POLICY
    with RestoreGuard([gov]):
        res = gov.set_level(8, settle_s=0)
        assert (pol / "scaling_governor").read_text() == "userspace\n"
        assert (pol / "scaling_setspeed").read_text() == "1800000\n"
        assert res.effective_khz == 1800000
        boot = b.freqs_khz[len(b.freqs_khz) // 2]
        delay_us = sim_model.transition_delay_us(b, boot, 1800000)
        # Table 10 for B going up: 193 us for one level ... 3811 us across the table
        assert 193 <= delay_us <= 3811
        assert gov.effective_khz(int(delay_us * 1000) - 1) == boot
        clock.now = int(delay_us * 1000)
        assert gov.effective_khz() == 1800000
        # one level down: the shortest down delay, 91 us
        gov.request_khz(1608000)
        assert sim_model.transition_delay_us(b, 1800000, 1608000) == 91
        assert gov.effective_khz(clock.now + 90_999) == 1800000
        assert gov.effective_khz(clock.now + 91_000) == 1608000
    assert snapshot(tmp_path) == before
    gpu = make_governor(board, board.processor("G"), sim_tree=tree)
    with RestoreGuard([gpu]):
        assert gpu.set_level(4, settle_s=0).effective_khz == 600000
        assert (tmp_path / "class/devfreq/ff9a0000.gpu/userspace/set_freq").read_text() \
            == "600000000\n"
    assert snapshot(tmp_path) == before


def test_a_kept_sim_tree_opens_as_its_files_say_and_names_a_file_that_is_no_frequency(
        tmp_path, monkeypatch):
    """`share_at` on a tree left by another process (a rank a launcher restores for) takes
    the frequency its files hold; the kernel's files are replaced whole, never left empty
    for such a reader, and one that is anyway is a BoardError naming it, not a traceback."""
    monkeypatch.setattr(SimTree, "_shared", {})  # this process's shared trees stay as they were
    board = load_board("sim")
    first = SimTree(board, root=tmp_path)
    gov = make_governor(board, board.processor("B"), sim_tree=first)
    gov.set_level(8, settle_s=0)
    assert sorted(p.name for p in (tmp_path / B_POLICY).iterdir() if p.name.startswith(".")) \
        == []  # no temporary file left beside the ones the kernel wrote
    again = SimTree.share_at(board, tmp_path)
    assert again.kernel.effective_khz(tmp_path / B_POLICY, now_ns=0) == 1800000
    (tmp_path / B_POLICY / "scaling_cur_freq").write_text("")
    with pytest.raises(BoardError, match="scaling_cur_freq holds '', not a frequency"):
        SimTree.share_at(board, tmp_path)

def test_sim_models_follow_the_profile():
    """The profile's fitted tables are what the simulated processors price calls with
    (the formulas themselves: tests/test_sim_perf.py)."""
    from profiler.sim import model as sim_model
    from profiler.sim import perf
    from profiler.sim.work import OpWork

    board = load_board("sim")
    g = board.processor("G")
    c = sim_model.constants(g)
    raw = g.extra["sim"]
    assert c.timing.call_us == raw["timing"]["call_us"]
    assert c.timing.macs_per_cycle == raw["timing"]["macs_per_cycle"]
    assert c.power.ceff_nf == raw["power"]["ceff_nf"]
    assert sim_model.operating_point(g, 600000) == (600000, 0.925)
    # A compute-bound conv at a lower level: slower, and less power.
    works = perf.Works.of([OpWork("conv3x3s1", 200_000_000, 400_000, 100_000, 3136)])
    slow = perf.call_split(c.timing, works, 0.2, 1.8, 0.8)
    fast = perf.call_split(c.timing, works, 0.8, 1.8, 0.8)
    assert float(slow.total_ms) > float(fast.total_ms)
    assert float(perf.dynamic_power_w(c.power, slow, 0.8, 0.2)) < \
        float(perf.dynamic_power_w(c.power, fast, 1.1, 0.8))
    n = board.processor("N")
    assert sim_model.operating_point(n, None) == (800000, 0.9)
    assert sim_model.compute_slowdown(g, 200000) == pytest.approx(4.0)
