"""`coupprof doctor`: what this machine offers for profiling, and what to fix.

Sections: runtime and versions; accelerators (LiteRT GPU/NPU libraries and devices,
delegates named by the board profile); the board (detected or chosen) and its
governors with whether their files exist and are writable and whether the profile's
levels are ones the kernel offers; GPIO chips; serial ports and, where one answers
IDENTIFY, the logger's identity. Every problem is printed with its fix. The
collection is a dataclass so tests and other commands can use it without rendering.

On the simulated board it says whether `--board host` would measure real hardware here
(profiler.boards.hostprobe). On a real board it prints the udev rule and group that let
a normal user profile it without sudo (profiler.platform.access); ``--udev`` prints only
the rule file.

``--devices FILE`` checks a devices file's devices instead (profiler.devices.check): each
host reached, board profile found, power and marker specs valid; a line per problem and
exit 2 (bad input, or a host that cannot be reached).
"""

from __future__ import annotations

import argparse
import ctypes.util
import glob
import importlib.metadata
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.markup import escape
from rich.table import Table

from governors import make_governor
from profiler import __version__
from profiler.boards.hostprobe import probe_host
from profiler.boards.model import Board
from profiler.boards.profiles import detect_board, read_model_string
from profiler.cli import command_help
from profiler.cli.common.devices import add_devices_option
from profiler.cli.common.options import add_board_args, stdout_console
from profiler.cli.common.plumbing import sysfs_root
from profiler.errors import BadInputError, ProfilerError
from profiler.platform import choose_board
from profiler.platform.access import DEFAULT_GROUP, AccessPlan, plan_access

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers
    from profiler.devices.check import DevicesReport


@dataclass(frozen=True)
class Item:
    section: str
    name: str
    ok: bool | None  # None = information only
    detail: str
    fix: str = ""


@dataclass
class Report:
    items: list[Item] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # not problems, but worth knowing
    board: Board | None = None
    loggers: list[str] = field(default_factory=list)  # ports whose logger answered IDENTIFY

    def add(self, section: str, name: str, ok: bool | None, detail: str, fix: str = "") -> None:
        self.items.append(Item(section, name, ok, detail, fix))

    @property
    def problems(self) -> list[Item]:
        return [i for i in self.items if i.ok is False]


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "doctor",
        help=command_help(__name__),
        description="Report what this machine offers for profiling (runtime and versions, "
        "accelerators, the detected board, DVFS governors and whether they are writable, "
        "GPIO chips, serial ports and the logger's identity) and how to fix each problem.",
    )
    add_board_args(p)
    p.add_argument("--dev-root", default="/dev", metavar="DIR",
                   help="where device nodes live (default /dev)")
    p.add_argument("--port", action="append", default=None, metavar="URL",
                   help="serial port or pyserial URL to ask for a logger (repeatable; "
                   "default: every port pyserial lists)")
    p.add_argument("--no-identify", action="store_true",
                   help="list serial ports without sending IDENTIFY")
    p.add_argument("--strict", action="store_true", help="exit 1 when any problem is found")
    dev = p.add_argument_group(
        "several devices",
        "Check a devices file's devices instead of this machine: a remote host must resolve "
        "and answer on TCP port 22 (MPI starts ranks over ssh), its board profile must "
        "exist, its power and marker specs must be valid. Exit 2 on bad input or when a "
        "host cannot be reached.")
    add_devices_option(dev, "check that each of its devices can be used")
    dev.add_argument("--timeout-s", type=float, default=2.0, metavar="S",
                     help="how long a remote host's ssh port has to answer (default 2)")
    acc = p.add_argument_group(
        "least privilege",
        "On a real board doctor prints a udev rule and a group that let a normal user write "
        "exactly the board's governor files and open its GPIO chip and the logger's serial "
        "port, so coupprof needs no sudo; root installs it once.")
    acc.add_argument("--udev", action="store_true",
                     help="print only the rule file, e.g. `coupprof doctor --board NAME --udev "
                     "| sudo tee /etc/udev/rules.d/99-coupprof.rules`")
    acc.add_argument("--group", default=DEFAULT_GROUP, metavar="NAME",
                     help=f"the group the rule grants access to (default: {DEFAULT_GROUP})")
    acc.add_argument("--marker", default=None, metavar="SPEC",
                     help="the marker coupprof will use (gpiod:CHIP:LINES), for its GPIO chip "
                     "(default: the profile's, else gpiochip0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.devices is not None:
        return run_devices(args)
    root = sysfs_root(args)
    if args.udev:
        board = choose_board(args.board, root, letters=())
        if board.simulated:
            raise BadInputError(f"board '{board.name}' is simulated: it needs no udev rule",
                                "name the real board with --board NAME (or --board host)")
        rules = plan_access(board, root, group=args.group, marker=args.marker, ports=args.port)
        sys.stdout.write(rules.rules_text())
        return 0
    report = collect(root, Path(args.dev_root), args.board, args.port, not args.no_identify)
    plan = None
    if report.board is not None and not report.board.simulated:
        # The ports given, else those where the logger answered, else every USB serial port.
        plan = plan_access(report.board, root, group=args.group, marker=args.marker,
                           ports=args.port or report.loggers or None)
    out = stdout_console()
    out.print(render(report))
    if report.problems:
        out.print(f"{len(report.problems)} problem(s):")
        for item in report.problems:
            out.print(f"- {item.section} / {item.name}: {item.detail}" + (
                f"\n  fix: {item.fix}" if item.fix else ""), highlight=False)
    else:
        out.print("no problems found")
    for hint in report.hints:
        out.print(f"hint: {hint}", highlight=False)
    if plan is not None:  # unwrapped: rule lines are long and must stay whole
        out.print(render_access(plan), highlight=False, markup=False, soft_wrap=True)
    return 1 if args.strict and report.problems else 0


def run_devices(args: argparse.Namespace) -> int:
    from profiler.devices.check import check_devices
    from profiler.devices.spec import read_devices

    if args.timeout_s <= 0:
        raise BadInputError(f"--timeout-s {args.timeout_s:g} is not > 0", "give seconds, e.g. 2")
    report = check_devices(read_devices(args.devices), timeout_s=args.timeout_s)
    stdout_console().print(render_devices(report))
    for device, check in report.problems:
        who = "MPI" if device is None else f"device {device.name} ({device.host})"
        print(f"coupprof doctor: {who}: {check.detail}" + (f"; {check.fix}" if check.fix else ""),
              file=sys.stderr)
    if not report.problems:
        stdout_console().print(f"all {len(report.reports)} devices can be used")
    return report.exit_code


def render_devices(report: DevicesReport) -> Table:
    t = Table(title=f"coupprof doctor: devices in {report.devices.path}", box=box.SIMPLE_HEAD)
    for col in ("device", "item", "status", "detail"):
        t.add_column(col, overflow="fold")
    mark = {True: "ok", False: "PROBLEM", None: "-"}
    t.add_row("", report.mpi.what, mark[report.mpi.ok], escape(report.mpi.detail))
    for r in report.reports:
        for i, c in enumerate(r.checks):
            t.add_row(r.device.name if i == 0 else "", c.what, mark[c.ok], escape(c.detail))
    return t


def render_access(plan: AccessPlan) -> str:
    lines = [f"\nrun coupprof on {plan.board} without sudo: as root, once (then log out and "
             f"in again), to give group {plan.group} the files and devices below:"]
    lines += [f"  {c}" for c in plan.setup_commands()]
    lines.append(f"the rule file (`coupprof doctor {plan.doctor_args()} --udev` prints it):")
    return "\n".join(lines + ["  " + line if line else "" for line in
                              plan.rules_text().splitlines()])


def collect(root: Path, dev_root: Path, board_arg: str | None, ports: list[str] | None,
            identify: bool) -> Report:
    r = Report()
    check_runtime(r)
    board = r.board = check_board(r, root, board_arg, dev_root)
    check_accelerators(r, board)
    if board is not None:
        check_governors(r, board, root)
    check_gpio(r, dev_root, root)
    check_serial(r, ports, identify)
    return r


def check_runtime(r: Report) -> None:
    r.add("runtime", "python", None, f"{platform.python_version()} ({sys.executable})")
    r.add("runtime", "coupprof", None, __version__)
    r.add("runtime", "kernel", None, f"{platform.system()} {platform.release()} "
          f"{platform.machine()}")
    try:
        from profiler.runtime import runtime

        rt = runtime()
        r.add("runtime", "inference runtime", True, f"{rt.name} {rt.version}")
    except ProfilerError as err:
        r.add("runtime", "inference runtime", False, err.message, err.fix or "")
    for dist in ("numpy", "pandas", "pyserial", "rich", "flatbuffers"):
        try:
            r.add("runtime", dist, None, importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            r.add("runtime", dist, False, "not installed", "run ./setup.sh")


def _litert_dir() -> Path | None:
    try:
        import ai_edge_litert

        return Path(ai_edge_litert.__file__).parent
    except ImportError:
        return None


def check_accelerators(r: Report, board: Board | None) -> None:
    base = _litert_dir()
    # GPU: this LiteRT ships a WebGPU accelerator, which runs over Vulkan (a loader
    # plus a driver's ICD manifest); builds with an OpenCL accelerator need an OpenCL ICD.
    from profiler.executors.accelerator import vulkan_icds

    webgpu = bool(base and (base / "libLiteRtWebGpuAccelerator.so").exists())
    vulkan = ctypes.util.find_library("vulkan")
    vk_icds = vulkan_icds()
    vk_env = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    opencl = ctypes.util.find_library("OpenCL")
    cl_icds = glob.glob("/etc/OpenCL/vendors/*.icd")
    gpu_ok = bool(webgpu and vulkan and (vk_icds or vk_env)) or bool(opencl and cl_icds)
    detail = (f"WebGPU accelerator: {'yes' if webgpu else 'no'}; Vulkan loader: "
              f"{vulkan or 'none'}; Vulkan ICDs: {len(vk_icds)}"
              f"{f' (VK_DRIVER_FILES={vk_env})' if vk_env else ''}; OpenCL ICDs: {len(cl_icds)}"
              " (library check only; `coupprof layers -p G` tries it)")
    wants_gpu = board is not None and any(p.accelerator == "gpu" and not board.simulated
                                          for p in board.processors.values())
    r.add("accelerators", "LiteRT GPU", gpu_ok if wants_gpu else None, detail,
          "install the Vulkan loader (libvulkan1) and the GPU driver's Vulkan ICD, or point "
          "VK_DRIVER_FILES at the driver's ICD json")
    dispatch = sorted(Path(p).parts[-3] for p in glob.glob(
        str(base / "vendors/*/dispatch/libLiteRtDispatch_*.so"))) if base else []
    npu_nodes = [p for pat in ("accel/accel*", "fastrpc-*", "galcore", "rknpu*", "vipcore")
                 for p in glob.glob(f"/dev/{pat}")]
    wants_npu = board is not None and any(p.accelerator == "npu" and not board.simulated
                                          for p in board.processors.values())
    r.add("accelerators", "LiteRT NPU", (bool(dispatch) and bool(npu_nodes)) if wants_npu else None,
          f"dispatch libraries: {', '.join(dispatch) or 'none'}; NPU device nodes: "
          f"{', '.join(npu_nodes) or 'none'}",
          "install the vendor's LiteRT dispatch library and NPU driver")
    if board is None:
        return
    for p in board.processors.values():
        if p.delegate:
            found = os.path.exists(p.delegate) or ctypes.util.find_library(
                Path(p.delegate).name.removeprefix("lib").split(".so")[0]) is not None
            r.add("accelerators", f"{p.letter} delegate", found, p.delegate,
                  f"install {p.delegate} or set `delegate` in the board profile to its path")


def check_board(r: Report, root: Path, board_arg: str | None, dev_root: Path) -> Board | None:
    model = read_model_string(root)
    r.add("board", "device tree model", None, model or "none (not a device-tree machine)")
    detected = detect_board(root)
    r.add("board", "detected", None, detected or "no bundled profile matches")
    notes: list[str] = []
    try:
        # letters=(): G on `host` is only LiteRT's maybe; the accelerators section tells
        board = choose_board(board_arg, root, letters=(), announce=notes.append)
    except ProfilerError as err:
        r.add("board", "profile", False, err.message, err.fix or "")
        return None
    r.add("board", "using", True if board.simulated or board_arg or detected else None,
          f"{board.name}: {board.description}"
          + (" (simulated: numbers are modelled)" if board.simulated else ""))
    hw = probe_host(root, dev_root=dev_root)
    r.add("board", "this machine", None, hw.describe()
          + (" (`--board host` measures it)" if hw.measurable and board.simulated else ""))
    if board.simulated and hw.measurable:
        r.hints.append(f"this machine has {hw.describe()}: `--board host` measures it; "
                       f"'{board.name}', used here, is simulated and its numbers are modelled")
    return board


def check_governors(r: Report, board: Board, root: Path) -> None:
    for p in board.processors.values():
        if p.governor is None:
            r.add("governors", p.letter, None,
                  f"no DVFS{' (uses ' + p.host + ' levels)' if p.host else ''}")
            continue
        gov = make_governor(board, p, root)
        checks = gov.checks()
        bad = [c for c in checks if not c.ok]
        if bad:
            for c in bad:
                r.add("governors", p.letter, False, c.what, c.fix)
            continue
        r.add("governors", p.letter, True, f"{gov.describe()}: files writable")
        have = gov.available_khz()
        missing = [f for f in p.freqs_khz if have and f not in have]
        if missing:
            r.add("governors", f"{p.letter} levels", False,
                  f"profile levels {', '.join(f'{f / 1000:g}' for f in missing)} MHz are not"
                  f" offered by the kernel ({', '.join(f'{f / 1000:g}' for f in have)})",
                  "edit freqs_khz in the board profile to the kernel's levels"
                  + (" (or use --board host for CPUs)" if p.kind.is_cpu else ""))


def check_gpio(r: Report, dev_root: Path, root: Path) -> None:
    chips = sorted(dev_root.glob("gpiochip*"))
    if not chips:
        r.add("gpio", "chips", None if not (root / "class/gpio").exists() else False,
              f"no {dev_root}/gpiochip* character devices",
              "markers need a GPIO chip: use a board with one, or `--markers sim`/`none`")
    for chip in chips:
        label = _read(root / "bus/gpio/devices" / chip.name / "label") or \
            _read(root / "class/gpio" / chip.name / "label") or "?"
        ok = os.access(chip, os.R_OK | os.W_OK)
        r.add("gpio", chip.name, ok, f"label {label}", "" if ok else
              "open it to a group of yours with the udev rule `coupprof doctor --board NAME "
              "--udev` prints, or run as root")
    try:
        import gpiod  # noqa: F401

        r.add("gpio", "python gpiod", True, "installed")
    except ImportError:
        r.add("gpio", "python gpiod", None if not chips else False, "not installed",
              "pip install 'coupprof[gpio]' (libgpiod v2 bindings)")


def check_serial(r: Report, ports: list[str] | None, identify: bool) -> None:
    if ports is None:
        try:
            from serial.tools import list_ports

            found = list_ports.comports()
        except ImportError:
            r.add("serial", "pyserial", False, "not installed", "run ./setup.sh")
            return
        # The logger is a USB serial device (ttyACM/ttyUSB); built-in UARTs (hwid n/a)
        # are listed but not probed, so a silent ttyS0 is not reported as a broken logger.
        ports = [p.device for p in found if p.hwid and p.hwid != "n/a"]
        for p in found:
            r.add("serial", p.device, None, f"{p.description} {p.hwid}".strip()
                  + ("" if p.device in ports else " (not USB: not probed; use --port to probe)"))
        if not found:
            r.add("serial", "ports", None, "no serial ports found (the power logger is optional;"
                  " `--power sim` works without one)")
    if not identify:
        return
    try:
        from profiler.power.collector import Collector
    except ImportError:
        r.add("serial", "logger", None, "power collector not installed; identity not checked")
        return
    for url in ports:
        try:
            with Collector(url, timeout_s=1.0) as col:
                info = col.open()
            r.add("serial", f"{url} logger", True,
                  f"protocol {info.protocol}, firmware {info.fw_version}, {info.rate_hz} Hz, "
                  f"{info.marker_count} marker pins, front end {info.front_end}")
            r.loggers.append(url)
        except ProfilerError as err:
            r.add("serial", f"{url} logger", False, err.message, err.fix or "")


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def render(report: Report) -> Table:
    t = Table(title="coupprof doctor", box=box.SIMPLE_HEAD)
    for col in ("section", "item", "status", "detail"):
        t.add_column(col, overflow="fold")
    mark = {True: "ok", False: "PROBLEM", None: "-"}
    for i in report.items:
        t.add_row(i.section, i.name, mark[i.ok], i.detail)
    return t
