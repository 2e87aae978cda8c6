"""Fake sysfs trees laid out like each real board, and a fake kernel that acts on them.

Each `build_<board>(root)` writes real files (and the real symlinks: cpuN/cpufreq ->
../cpufreq/policyN, class/devfreq/X -> the platform device) under `root/sys`, plus
`root/proc/device-tree/model`, and returns a `FakeBoardTree`. The values are typed
from the boards' kernels and datasheets here, independently of data/boards/*.toml,
so a profile that disagrees with its board shows up as a failing test.

`FakeKernel` is this file's own model of what the kernel does after a write
(current frequency follows governor and limits, cpufreq's scaling_setspeed reads
"<unsupported>" outside the userspace governor, devfreq's userspace/ directory exists
only under the userspace governor, kgsl and mpgpu clamp to their limits). Tests apply
it synchronously: either after every write (`on_write`, passed to SysfsIO) or once at a
chosen moment (`settle()`), e.g. after a subprocess exits.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CPU = "devices/system/cpu"
CPU_GOVS = "conservative ondemand userspace powersave performance schedutil"


@dataclass
class FakeBoardTree:
    root: Path  # the fake filesystem root (holds sys/ and proc/)
    board: str
    model: str
    kernel: FakeKernel = field(repr=False, default=None)  # type: ignore[assignment]

    @property
    def sys(self) -> Path:
        return self.root / "sys"


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file's bytes and every symlink's target under `root` (for byte-for-byte checks)."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "<dir>"
    return out


def _model(root: Path, model: str) -> None:
    # Device tree strings end in NUL; /proc/device-tree links to /sys/firmware/devicetree/base.
    base = root / "sys/firmware/devicetree/base"
    base.mkdir(parents=True, exist_ok=True)
    (base / "model").write_bytes(model.encode() + b"\x00")
    _link(root / "proc/device-tree", base)


def _cpus(sys: Path, n: int, capacities: list[int] | None = None) -> None:
    cpu = sys / CPU
    for name in ("online", "possible", "present"):
        _put(cpu / name, f"0-{n - 1}")
    for c in range(n):
        d = cpu / f"cpu{c}"
        d.mkdir(parents=True, exist_ok=True)
        if c:
            _put(d / "online", "1")
        if capacities:
            _put(d / "cpu_capacity", str(capacities[c]))


def _policy(sys: Path, policy: int, cpus: list[int], freqs: list[int], driver: str,
            governor: str, cur: int, governors: str = CPU_GOVS,
            lo: int | None = None, hi: int | None = None) -> Path:
    d = sys / CPU / "cpufreq" / f"policy{policy}"
    lo = freqs[0] if lo is None else lo
    hi = freqs[-1] if hi is None else hi
    cpulist = " ".join(map(str, cpus))
    files = {
        "affected_cpus": cpulist, "related_cpus": cpulist,
        "cpuinfo_min_freq": str(freqs[0]), "cpuinfo_max_freq": str(freqs[-1]),
        "cpuinfo_transition_latency": "40000", "cpuinfo_cur_freq": str(cur),
        "scaling_available_frequencies": " ".join(map(str, freqs)) + " ",
        "scaling_available_governors": governors + " ",
        "scaling_driver": driver, "scaling_governor": governor,
        "scaling_min_freq": str(lo), "scaling_max_freq": str(hi),
        "scaling_cur_freq": str(cur),
        "scaling_setspeed": "<unsupported>" if governor != "userspace" else str(cur),
        "stats/total_trans": "1234",
        "stats/time_in_state": "\n".join(f"{f} 100" for f in freqs),
    }
    for name, text in files.items():
        _put(d / name, text)
    for c in cpus:
        _link(sys / CPU / f"cpu{c}" / "cpufreq", d)
    return d


def _devfreq(sys: Path, platform_path: str, name: str, freqs_hz: list[int], governor: str,
             governors: str, cur_hz: int) -> Path:
    dev = sys / "devices/platform" / platform_path / "devfreq" / name
    files = {
        "available_frequencies": " ".join(map(str, freqs_hz)) + " ",
        "available_governors": governors + " ",
        "governor": governor,
        "min_freq": str(freqs_hz[0]), "max_freq": str(freqs_hz[-1]),
        "cur_freq": str(cur_hz), "target_freq": str(cur_hz),
        "polling_interval": "50", "name": name,
        "trans_stat": "     From  :   To\n",
    }
    for fname, text in files.items():
        _put(dev / fname, text)
    if governor == "userspace":
        _put(dev / "userspace/set_freq", str(cur_hz))
    _link(sys / "class/devfreq" / name, dev)
    return dev


# ---- the boards --------------------------------------------------------------------

RK_L = [408000, 600000, 816000, 1008000, 1200000, 1416000]
RK_B = [408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000]
RK_GPU_HZ = [200000000, 300000000, 400000000, 600000000, 800000000]


def build_rk3399pro(root: Path) -> FakeBoardTree:
    """ROCK Pi N10: cpufreq-dt policies 0 (A53 x4) and 4 (A72 x2), Mali devfreq, DMC devfreq."""
    sys = root / "sys"
    _cpus(sys, 6, [485, 485, 485, 485, 1024, 1024])
    _policy(sys, 0, [0, 1, 2, 3], RK_L, "cpufreq-dt", "schedutil", 1008000)
    _policy(sys, 4, [4, 5], RK_B, "cpufreq-dt", "schedutil", 1200000)
    _devfreq(sys, "ff9a0000.gpu", "ff9a0000.gpu", RK_GPU_HZ, "simple_ondemand",
             "userspace powersave performance simple_ondemand", 400000000)
    _devfreq(sys, "dmc", "dmc", [200000000, 300000000, 400000000, 528000000, 800000000],
             "dmc_ondemand", "dmc_ondemand userspace powersave performance simple_ondemand",
             800000000)
    _model(root, "Radxa ROCK Pi N10")
    return _finish(root, "rk3399pro", "Radxa ROCK Pi N10")


QC_L = [300000, 403200, 499200, 576000, 691200, 806400, 940800, 1017600, 1152000, 1209600,
        1324800, 1516800, 1612800, 1708800, 1804800, 1900800]
QC_B = [691200, 940800, 1228800, 1344000, 1516800, 1651200, 1804800, 1900800, 2054400,
        2131200, 2400000]
QC_P = [806400, 1094400, 1401600, 1766400, 2054400, 2361600, 2592000, 2707200]
QC_GPU_HZ = [812000000, 700000000, 608000000, 550000000, 450000000, 315000000]  # level 0 first


def build_qcs6490(root: Path) -> FakeBoardTree:
    """RUBIK Pi 3: qcom-cpufreq-hw policies 0/4/7 and the Adreno kgsl directory."""
    sys = root / "sys"
    _cpus(sys, 8, [404] * 4 + [1024] * 4)
    _policy(sys, 0, [0, 1, 2, 3], QC_L, "qcom-cpufreq-hw", "schedutil", 1017600,
            governors="ondemand userspace performance schedutil")
    _policy(sys, 4, [4, 5, 6], QC_B, "qcom-cpufreq-hw", "schedutil", 1516800,
            governors="ondemand userspace performance schedutil")
    _policy(sys, 7, [7], QC_P, "qcom-cpufreq-hw", "schedutil", 1766400,
            governors="ondemand userspace performance schedutil")
    kgsl = sys / "devices/platform/soc@0/3d00000.gpu/kgsl/kgsl-3d0"
    files = {
        "gpu_available_frequencies": " ".join(map(str, QC_GPU_HZ)) + " ",
        "num_pwrlevels": str(len(QC_GPU_HZ)),
        "max_pwrlevel": "0", "min_pwrlevel": str(len(QC_GPU_HZ) - 1),
        "default_pwrlevel": "4", "thermal_pwrlevel": "0",
        "gpuclk": "315000000", "max_gpuclk": "812000000",
        "gpu_model": "Adreno643v1", "gpubusy": "       0       0",
        "gpu_busy_percentage": "0 %", "idle_timer": "80", "force_clk_on": "0",
        "freq_table_mhz": " ".join(str(h // 1000000) for h in QC_GPU_HZ),
    }
    for name, text in files.items():
        _put(kgsl / name, text)
    df = _devfreq(sys, "soc@0/3d00000.gpu", "3d00000.gpu",
                  sorted(QC_GPU_HZ), "msm-adreno-tz",
                  "msm-adreno-tz userspace powersave performance", 315000000)
    _link(kgsl / "devfreq", df)
    _link(sys / "class/kgsl/kgsl-3d0", kgsl)
    _model(root, "Thundercomm RUBIK Pi 3")
    return _finish(root, "qcs6490", "Thundercomm RUBIK Pi 3")


RPI5 = [1500000, 1600000, 1700000, 1800000, 1900000, 2000000, 2100000, 2200000, 2300000,
        2400000]


def build_rpi5(root: Path) -> FakeBoardTree:
    """Raspberry Pi 5: one cpufreq-dt policy for the four A76 cores."""
    sys = root / "sys"
    _cpus(sys, 4)
    _policy(sys, 0, [0, 1, 2, 3], RPI5, "cpufreq-dt", "ondemand", 1500000)
    _model(root, "Raspberry Pi 5 Model B Rev 1.0")
    return _finish(root, "rpi5", "Raspberry Pi 5 Model B Rev 1.0")


VIM_L = [100000, 250000, 500000, 667000, 1000000, 1200000, 1398000, 1512000, 1608000,
         1704000, 1800000]
VIM_B = VIM_L + [1908000, 2016000, 2108000, 2208000]
VIM_GPU_MHZ = [285, 400, 500, 666, 800]  # mpgpu reports clk_freq / 1000000 (whole MHz)


def build_khadas_vim3(root: Path) -> FakeBoardTree:
    """VIM3 (vendor kernel): policies 0 (A53 x2) and 2 (A73 x4); Mali through /sys/class/mpgpu."""
    sys = root / "sys"
    _cpus(sys, 6)
    _policy(sys, 0, [0, 1], VIM_L, "arm-big-little", "schedutil", 1000000)
    _policy(sys, 2, [2, 3, 4, 5], VIM_B, "arm-big-little", "schedutil", 1200000)
    mp = sys / "class/mpgpu"
    files = {
        "scale_mode": "1", "min_freq": "0", "max_freq": "4", "cur_freq": "800",
        "domain_stat": "0", "utilization": "0", "util_gl": "0", "util_cl": "0  0",
        "gpu_err": "0", "mpgpucmd": "",
    }
    for name, text in files.items():
        _put(mp / name, text)
    _model(root, "Khadas VIM3")
    return _finish(root, "khadas-vim3", "Khadas VIM3")


ORIN_CPU = [115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400,
            883200, 960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600,
            1510400]
ORIN_GPU_HZ = [306000000, 408000000, 510000000, 612000000, 624750000]


def build_jetson_orin_nano(root: Path) -> FakeBoardTree:
    """Orin Nano (JetPack 6): tegra194 cpufreq policies 0 and 4; GPU devfreq 17000000.gpu."""
    sys = root / "sys"
    _cpus(sys, 6)
    _policy(sys, 0, [0, 1, 2, 3], ORIN_CPU, "tegra194", "schedutil", 729600,
            governors="userspace ondemand performance schedutil")
    _policy(sys, 4, [4, 5], ORIN_CPU, "tegra194", "schedutil", 729600,
            governors="userspace ondemand performance schedutil")
    _devfreq(sys, "bus@0/17000000.gpu", "17000000.gpu", ORIN_GPU_HZ, "nvhost_podgov",
             "wmark_active nvhost_podgov userspace performance simple_ondemand", 306000000)
    _model(root, "NVIDIA Jetson Orin Nano Developer Kit")
    return _finish(root, "jetson-orin-nano", "NVIDIA Jetson Orin Nano Developer Kit")


BUILDERS = {
    "rk3399pro": build_rk3399pro,
    "qcs6490": build_qcs6490,
    "rpi5": build_rpi5,
    "khadas-vim3": build_khadas_vim3,
    "jetson-orin-nano": build_jetson_orin_nano,
}


def build(board: str, root: Path) -> FakeBoardTree:
    return BUILDERS[board](root)


def _finish(root: Path, board: str, model: str) -> FakeBoardTree:
    tree = FakeBoardTree(root, board, model)
    tree.kernel = FakeKernel(root / "sys")
    return tree


# ---- the fake kernel ---------------------------------------------------------------

def _rd(p: Path) -> str:
    return p.read_text().strip()


def _rint(p: Path) -> int:
    return int(_rd(p).split()[0])


class FakeKernel:
    """What the kernel does after writes, applied on demand to every domain of a tree."""

    def __init__(self, sys: Path) -> None:
        self.sys = sys
        self.writes: list[tuple[str, str]] = []  # (path relative to sys, value), in order
        # Resting frequency of non-userspace governors: what the tree was built with.
        self.boot: dict[Path, int] = {}
        for d in self.cpufreq_dirs():
            self.boot[d] = _rint(d / "scaling_cur_freq")
        for d in self.devfreq_dirs():
            self.boot[d] = _rint(d / "cur_freq")
        # kgsl and mpgpu: the level their own DVFS rests at when the limits allow it.
        for d in (sys / "class/kgsl/kgsl-3d0", sys / "class/mpgpu"):
            if d.exists():
                self.boot[d] = _rint(d / ("gpuclk" if "kgsl" in d.name else "cur_freq"))

    def cpufreq_dirs(self) -> list[Path]:
        return sorted((self.sys / CPU / "cpufreq").glob("policy*"))

    def devfreq_dirs(self) -> list[Path]:
        base = self.sys / "class/devfreq"
        return [p.resolve() for p in sorted(base.glob("*"))] if base.exists() else []

    def on_write(self, path: Path, value: str) -> None:
        try:
            rel = str(Path(path).resolve().relative_to(self.sys.resolve()))
        except ValueError:
            rel = str(path)
        self.writes.append((rel, value))
        self.settle()

    def settle(self) -> None:
        for d in self.cpufreq_dirs():
            self._cpufreq(d)
        for d in self.devfreq_dirs():
            self._devfreq(d)
        kgsl = self.sys / "class/kgsl/kgsl-3d0"
        if kgsl.exists():
            self._kgsl(kgsl)
        mp = self.sys / "class/mpgpu"
        if mp.exists():
            self._mpgpu(mp)

    def _cpufreq(self, d: Path) -> None:
        gov, lo, hi = _rd(d / "scaling_governor"), _rint(d / "scaling_min_freq"), \
            _rint(d / "scaling_max_freq")
        if gov == "userspace":
            text = _rd(d / "scaling_setspeed")
            if text.isdigit():
                want = int(text)
            else:  # entering userspace: setspeed starts at the current frequency
                want = _rint(d / "scaling_cur_freq")
                _put(d / "scaling_setspeed", str(want))
        else:
            if _rd(d / "scaling_setspeed") != "<unsupported>":
                _put(d / "scaling_setspeed", "<unsupported>")
            want = {"performance": hi, "powersave": lo}.get(gov, self.boot[d])
        # The driver can only run table frequencies: the lowest one >= the clamped target
        # (CPUFREQ_RELATION_L) that is still within the limits.
        table = sorted(int(x) for x in _rd(d / "scaling_available_frequencies").split())
        target = min(max(want, lo), hi)
        fits = [f for f in table if lo <= f <= hi]
        cur = str(next((f for f in fits if f >= target), fits[-1] if fits else target))
        for name in ("scaling_cur_freq", "cpuinfo_cur_freq"):
            if _rd(d / name) != cur:
                _put(d / name, cur)

    def _devfreq(self, d: Path) -> None:
        gov, lo, hi = _rd(d / "governor"), _rint(d / "min_freq"), _rint(d / "max_freq")
        user = d / "userspace"
        if gov == "userspace":
            if not user.exists():
                _put(user / "set_freq", _rd(d / "cur_freq"))
            want = _rint(user / "set_freq")
        else:
            if user.exists():
                shutil.rmtree(user)
            want = {"performance": hi, "powersave": lo}.get(gov, self.boot[d])
        cur = str(min(max(want, lo), hi))
        for name in ("cur_freq", "target_freq"):
            if _rd(d / name) != cur:
                _put(d / name, cur)

    def _kgsl(self, d: Path) -> None:
        levels = [int(x) for x in _rd(d / "gpu_available_frequencies").split()]
        mx, mn = _rint(d / "max_pwrlevel"), _rint(d / "min_pwrlevel")
        active = min(max(levels.index(self.boot[d]), mx), mn)  # level numbers: 0 fastest
        if _rint(d / "gpuclk") != levels[active]:
            _put(d / "gpuclk", str(levels[active]))

    def _mpgpu(self, d: Path) -> None:
        lo, hi = _rint(d / "min_freq"), _rint(d / "max_freq")
        idx = min(max(VIM_GPU_MHZ.index(self.boot[d]), lo), hi)
        if _rint(d / "cur_freq") != VIM_GPU_MHZ[idx]:
            _put(d / "cur_freq", str(VIM_GPU_MHZ[idx]))


class DelayedCurFreq:
    """A background 'hardware' that copies a cpufreq policy's requested frequency into
    scaling_cur_freq only `delay_s` after the request changed (for read-back latency tests).
    It writes nothing but the *_cur_freq files."""

    def __init__(self, policy: Path, delay_s: float) -> None:
        self.policy = policy
        self.delay_s = delay_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DelayedCurFreq:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _requested(self) -> int:
        d = self.policy
        lo, hi = _rint(d / "scaling_min_freq"), _rint(d / "scaling_max_freq")
        text = _rd(d / "scaling_setspeed")
        if _rd(d / "scaling_governor") == "userspace" and text.isdigit():
            return min(max(int(text), lo), hi)
        return min(max(_rint(d / "scaling_cur_freq"), lo), hi)

    def _run(self) -> None:
        pending: tuple[int, float] | None = None
        while not self._stop.is_set():
            try:
                want = self._requested()
            except (OSError, ValueError):
                want = None
            now = time.monotonic()
            cur = _rint(self.policy / "scaling_cur_freq")
            if want is not None and want != cur:
                if pending is None or pending[0] != want:
                    pending = (want, now)
                elif now - pending[1] >= self.delay_s:
                    for name in ("scaling_cur_freq", "cpuinfo_cur_freq"):
                        _put(self.policy / name, str(want))
                    pending = None
            else:
                # a request withdrawn before it took effect is forgotten: kept, a later
                # request of the same level took effect at once (655 us against 3 ms,
                # once in a suite beside a busy core)
                pending = None
            time.sleep(0.0002)
