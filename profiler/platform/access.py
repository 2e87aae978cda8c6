"""Least privilege: a udev rule and a group that let a normal user profile one board.

Instead of `sudo coupprof ...`, root runs a few commands once: make a group, add the user
to it, install the rule this module writes and trigger udev. The rule grants the group
exactly what coupprof touches on that board, read from its profile: the governor files,
the marker's GPIO chip and the logger's serial port. `plan_access` builds the rules from a
`Board`; `AccessPlan.rules_text` is the rule file, `AccessPlan.setup_commands` what root
runs.

Which udev events each file hangs on, and why: docs/boards.md.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from governors.factory import KINDS
from profiler.boards.model import Board, ProcessorSpec
from profiler.boards.profiles import list_boards
from profiler.errors import BadInputError

DEFAULT_GROUP = "coupprof"
RULES_FILE = "/etc/udev/rules.d/99-coupprof.rules"
#: The chip `--marker gpiod:LINES` uses when it names none.
DEFAULT_GPIO_CHIP = "gpiochip0"
SYS = PurePosixPath("/sys")
# Files a governor reads that the kernel makes root-only (0400).
ROOT_ONLY_READS = {"cpufreq": ("cpuinfo_cur_freq",)}
# Files a governor may write that no udev rule can reach (see docs/boards.md).
NO_EVENT = {"devfreq": ("userspace/set_freq",)}
_GROUP_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


@dataclass(frozen=True)
class Grant:
    """One udev rule: the event it hangs on and what it opens to the group."""

    what: str  # the comment above the rule
    match: tuple[tuple[str, str], ...]  # (key, value): KERNEL, SUBSYSTEM, ATTRS{idVendor}...
    write: tuple[str, ...] = ()  # sysfs attributes made group-writable (absolute /sys paths)
    read: tuple[str, ...] = ()  # root-only sysfs attributes made group-readable
    node: bool = False  # the event's /dev node: GROUP and MODE 0660
    notes: tuple[str, ...] = ()  # more comment lines

    def rule(self, group: str) -> str:
        keys = [f'{k}=="{v}"' for k, v in self.match]
        if self.node:
            keys += [f'GROUP="{group}"', 'MODE="0660"']
        else:
            # Attribute changes on every event but removal: add at boot, change on
            # `udevadm trigger`, online when a CPU comes back.
            keys.insert(0, 'ACTION!="remove"')
        files = (*self.write, *self.read)
        if files:
            keys.append(f'RUN+="/bin/chgrp {group} {" ".join(files)}"')
        if self.write:
            keys.append(f'RUN+="/bin/chmod g+w {" ".join(self.write)}"')
        if self.read:
            keys.append(f'RUN+="/bin/chmod g+r {" ".join(self.read)}"')
        lines = [f"# {self.what}", *(f"#   {n}" for n in self.notes), ", ".join(keys)]
        return "\n".join(lines)

    @property
    def subsystem(self) -> str:
        return dict(self.match).get("SUBSYSTEM", "")


@dataclass
class AccessPlan:
    board: str  # the --board value that selects it again (a name, or a profile's path)
    group: str
    marker: str | None = None  # the --marker it was made for
    ports: list[str] | None = None  # the --port values it was made for (None: all USB)
    grants: list[Grant] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is left out, and why

    def doctor_args(self) -> str:
        """The doctor options that make this plan again (for the install command)."""
        args = [f"--board {shlex.quote(self.board)}"]
        if self.group != DEFAULT_GROUP:
            args.append(f"--group {self.group}")
        if self.marker:
            args.append(f"--marker {shlex.quote(self.marker)}")
        args += [f"--port {shlex.quote(p)}" for p in self.ports or () if p.startswith("/dev/")]
        return " ".join(args)

    def rules_text(self) -> str:
        head = [f"# coupprof: least-privilege access to board {self.board} for group "
                f"{self.group}.",
                f"# Written by `coupprof doctor {self.doctor_args()} --udev`; install as "
                f"{RULES_FILE}",
                "# (udev's GROUP/MODE set /dev nodes only; sysfs attributes get theirs from"
                " RUN chgrp/chmod).",
                *(f"# {n}" for n in self.notes)]
        return "\n".join([*head, *(f"\n{g.rule(self.group)}" for g in self.grants)]) + "\n"

    def setup_commands(self) -> list[str]:
        """What root runs once; the user then logs in again to join the group."""
        subsystems = sorted({g.subsystem for g in self.grants if g.subsystem})
        trigger = " ".join(f"--subsystem-match={s}" for s in subsystems)
        return [
            f"sudo groupadd --system {self.group}",
            f'sudo usermod -aG {self.group} "$USER"    # then log out and in again',
            f"coupprof doctor {self.doctor_args()} --udev | sudo tee {RULES_FILE}",
            f"sudo udevadm control --reload && sudo udevadm trigger {trigger}",
        ]

    def granted_writes(self) -> list[str]:
        return [p for g in self.grants for p in g.write]


def check_group(name: str) -> str:
    if not _GROUP_RE.fullmatch(name):
        raise BadInputError(f"--group {name!r} is not a valid group name",
                            "use lower-case letters, digits, '_' and '-' (e.g. coupprof)")
    return name


def governor_files(kind: str) -> tuple[str, ...]:
    """The files (relative to the governor directory) a governor of `kind` may write."""
    cls = KINDS.get(kind)
    if cls is None:
        return ()
    # state_files() is what save() snapshots: every file the governor may write.
    files = cls.__new__(cls).state_files()
    return tuple(f for f in files if f not in NO_EVENT.get(kind, ()))


def _cpufreq_event(proc: ProcessorSpec, path: str) -> tuple[tuple[str, str], ...]:
    # policyN is named after the policy's first CPU, as is cpuN/cpufreq's directory.
    name = PurePosixPath(path).name
    m = re.fullmatch(r"policy(\d+)", name)
    cpu = int(m.group(1)) if m else (
        int(PurePosixPath(path).parent.name[3:]) if name == "cpufreq" else proc.cores[0])
    return (("SUBSYSTEM", "cpu"), ("KERNEL", f"cpu{cpu}"))


def governor_grant(proc: ProcessorSpec) -> Grant | None:
    spec = proc.governor
    if spec is None or spec.kind not in KINDS:
        return None
    base = SYS / spec.path
    name = PurePosixPath(spec.path).name
    if spec.kind == "cpufreq":
        match = _cpufreq_event(proc, spec.path)
        what = f"{proc.letter} ({proc.name}): cpufreq {spec.path}"
    elif spec.kind in ("devfreq", "kgsl"):
        match = (("SUBSYSTEM", spec.kind), ("KERNEL", name))
        what = f"{proc.letter} ({proc.name}): {spec.kind} {spec.path}"
    else:  # mpgpu
        match = (("SUBSYSTEM", "misc"), ("KERNEL", "mali0"))
        what = (f"{proc.letter} ({proc.name}): mpgpu {spec.path}, on the event of the Mali "
                "device node its driver creates")
    notes: tuple[str, ...] = ()
    if spec.kind in NO_EVENT:
        notes = (f"{', '.join(NO_EVENT[spec.kind])} appears root-only when the userspace "
                 "governor starts, with no event: a normal user's coupprof pins "
                 "min_freq = max_freq instead",)
    return Grant(
        what=what, match=match, notes=notes,
        write=tuple(str(base / f) for f in governor_files(spec.kind)),
        read=tuple(str(base / f) for f in ROOT_ONLY_READS.get(spec.kind, ())),
    )


def gpio_chip_name(board: Board, marker: str | None) -> str | None:
    """The GPIO chip the marker uses: from `--marker gpiod:CHIP:LINES`, else the profile's
    [board.markers] chip, else gpiochip0 (what gpiod:LINES uses). None: no gpiod marker."""
    if marker is not None:
        kind, _, rest = marker.partition(":")
        if kind.lower() != "gpiod":
            return None
        fields = rest.split(":")
        chip = fields[0] if len(fields) == 2 else DEFAULT_GPIO_CHIP
    else:
        markers = board.extra.get("markers", {})
        if markers.get("backend", "gpiod") != "gpiod":
            return None
        chip = markers.get("chip") or DEFAULT_GPIO_CHIP
    name = PurePosixPath(chip).name
    return f"gpiochip{name}" if name.isdigit() else name


@dataclass(frozen=True)
class UsbSerial:
    """A USB serial port as udev sees it: its kernel name and its USB device's identity."""

    kernel: str  # ttyACM0
    vendor: str  # idVendor, e.g. 2341
    product: str  # idProduct
    serial: str | None  # the USB serial number, if the device has one


def usb_serial(sysfs_root: Path, kernel: str) -> UsbSerial | None:
    """The USB identity of tty `kernel` (e.g. ttyACM0) under `sysfs_root`, or None."""
    link = sysfs_root / "class/tty" / kernel
    if not link.exists():
        return None
    d = link.resolve()
    root = sysfs_root.resolve()
    while d != root and d != d.parent:
        if (d / "idVendor").is_file() and (d / "idProduct").is_file():
            serial = d / "serial"
            return UsbSerial(kernel, (d / "idVendor").read_text().strip(),
                             (d / "idProduct").read_text().strip(),
                             serial.read_text().strip() if serial.is_file() else None)
        d = d.parent
    return None


def usb_serial_ports(sysfs_root: Path, ports: list[str] | None) -> list[UsbSerial]:
    """The ports given (device paths; URLs are skipped), else every USB serial port."""
    if ports is not None:
        names = [PurePosixPath(p).name for p in ports if p.startswith("/dev/")]
    else:
        names = sorted(p.name for p in (sysfs_root / "class/tty").glob("tty*")
                       if p.name.startswith(("ttyACM", "ttyUSB")))
    return [u for u in (usb_serial(sysfs_root, n) for n in names) if u is not None]


def plan_access(board: Board, sysfs_root: Path, *, group: str = DEFAULT_GROUP,
                marker: str | None = None, ports: list[str] | None = None) -> AccessPlan:
    """The rules that let `group` profile `board` without root.

    sysfs_root is read only to identify serial ports; every governor path comes from the
    profile, as the kernel names them under /sys.
    """
    again = board.name if board.source is None or board.name in list_boards() \
        else str(board.source)
    plan = AccessPlan(again, check_group(group), marker, ports)
    if board.simulated:
        plan.notes.append(f"board {board.name} is simulated: coupprof needs no privileges there")
        return plan
    done: set[str] = set()
    for proc in board.processors.values():
        grant = governor_grant(proc)
        if grant is not None and grant.write and grant.write[0] not in done:
            done.add(grant.write[0])
            plan.grants.append(grant)
    if not plan.grants:
        plan.notes.append(f"no processor of board {board.name} has governor files to grant "
                          "(no DVFS here)")
    chip = gpio_chip_name(board, marker)
    if chip is not None:
        plan.grants.append(Grant(
            what=f"GPIO marker lines: /dev/{chip} (another chip: pass --marker gpiod:CHIP:LINE)",
            match=(("SUBSYSTEM", "gpio"), ("KERNEL", chip)), node=True))
    else:
        plan.notes.append("no gpiod marker: no GPIO chip is opened")
    serials = usb_serial_ports(sysfs_root, ports)
    for s in serials:
        match = [("SUBSYSTEM", "tty"), ("ATTRS{idVendor}", s.vendor),
                 ("ATTRS{idProduct}", s.product)]
        if s.serial:
            match.append(("ATTRS{serial}", s.serial))
        plan.grants.append(Grant(
            what=f"power logger: /dev/{s.kernel} (USB {s.vendor}:{s.product}"
                 f"{', serial ' + s.serial if s.serial else ''})",
            match=tuple(match), node=True))
    if not serials:
        plan.notes.append("no USB serial port found for the power logger: plug it in and run "
                          "this again, or pass --port /dev/ttyACM0")
    return plan
