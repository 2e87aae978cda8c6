"""A small model of udev for the least-privilege tests: it reads a rules file, finds the
devices of a fake tree (tests/fake_sysfs.py) each rule matches and applies the rule as
udevd would on an "add" event: RUN commands with %p expanded (really run, with /sys/
mapped into the tree, when asked), GROUP and MODE on the /dev node.

It knows the rule keys the tests need (ACTION, SUBSYSTEM, KERNEL, ATTRS{...}; GROUP,
MODE, RUN) and where a fake tree keeps devices: /sys/devices/system/cpu/cpuN (subsystem
cpu), /sys/class/<subsystem>/<name> and /sys/bus/<subsystem>/devices/<name>.
Also: builders for the devices the board trees lack (GPIO chips, USB serial ports, a Mali
node), with a stand-in file in <root>/dev for each device node.
"""

from __future__ import annotations

import fnmatch
import grp
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TOKEN = re.compile(r'([A-Z]+(?:\{[^}]+\})?)\s*(==|!=|\+=|=)\s*"([^"]*)"')


@dataclass
class Rule:
    match: list[tuple[str, str, str]]  # (key, op, value), op == or !=
    assign: list[tuple[str, str, str]]  # (key, op, value), op = or +=


@dataclass
class Effects:
    """What the rules did: group and mode bits per sysfs file and per device node."""

    groups: dict[Path, str] = field(default_factory=dict)  # file -> group (chgrp / GROUP)
    writable: set[Path] = field(default_factory=set)  # chmod g+w
    readable: set[Path] = field(default_factory=set)  # chmod g+r
    nodes: dict[Path, tuple[str, str]] = field(default_factory=dict)  # /dev node -> (group, mode)


def parse_rules(text: str) -> list[Rule]:
    rules = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = TOKEN.findall(line)
        assert tokens and not TOKEN.sub("", line).replace(",", "").strip(), \
            f"cannot read rule: {line}"
        rules.append(Rule([t for t in tokens if t[1] in ("==", "!=")],
                          [t for t in tokens if t[1] in ("=", "+=")]))
    return rules


def devices(sys: Path) -> list[tuple[str, str, Path]]:
    """(subsystem, kernel name, device directory) of every device in the tree."""
    out = [("cpu", d.name, d) for d in sorted((sys / "devices/system/cpu").glob("cpu[0-9]*"))]
    for link in sorted((sys / "class").glob("*/*")):
        out.append((link.parent.name, link.name, link.resolve()))
    for link in sorted((sys / "bus").glob("*/devices/*")):
        out.append((link.parent.parent.name, link.name, link.resolve()))
    return out


def _attr(sys: Path, devdir: Path, name: str, value: str) -> bool:
    d, top = devdir.resolve(), sys.resolve()
    while d != top and d != d.parent:
        f = d / name
        if f.is_file() and fnmatch.fnmatchcase(f.read_text().strip(), value):
            return True
        d = d.parent
    return False


def matches(rule: Rule, sys: Path, subsystem: str, kernel: str, devdir: Path,
            action: str = "add") -> bool:
    for key, op, value in rule.match:
        if key == "ACTION":
            ok = fnmatch.fnmatchcase(action, value)
        elif key == "SUBSYSTEM":
            ok = fnmatch.fnmatchcase(subsystem, value)
        elif key == "KERNEL":
            ok = fnmatch.fnmatchcase(kernel, value)
        elif key.startswith("ATTRS{"):
            ok = _attr(sys, devdir, key[6:-1], value)
        else:
            raise AssertionError(f"the udev model does not know key {key}")
        if ok != (op == "=="):
            return False
    return True


def apply_rules(text: str, root: Path, *, execute: bool = False) -> Effects:
    """Every device under root/sys against every rule, as on "add"; execute: really run
    the RUN commands (paths under /sys/ moved into the tree) and set the nodes' group and
    mode (root only: chgrp to a group one is not in needs it)."""
    sys, eff = root / "sys", Effects()
    for subsystem, kernel, devdir in devices(sys):
        devpath = "/" + str(devdir.relative_to(sys.resolve()))
        for rule in parse_rules(text):
            if not matches(rule, sys, subsystem, kernel, devdir):
                continue
            for key, _, value in rule.assign:
                if key == "RUN":
                    _run(value.replace("%p", devpath), root, eff, execute)
                elif key in ("GROUP", "MODE"):
                    node = root / "dev" / kernel
                    group, mode = eff.nodes.get(node, ("root", "0600"))
                    eff.nodes[node] = (value, mode) if key == "GROUP" else (group, value)
                else:
                    raise AssertionError(f"the udev model does not know {key}")
    if execute:
        for node, (group, mode) in eff.nodes.items():
            os.chown(node, -1, grp.getgrnam(group).gr_gid)
            node.chmod(int(mode, 8))
    return eff


def _run(command: str, root: Path, eff: Effects, execute: bool) -> None:
    argv = shlex.split(command)
    files = [root / a[1:] if a.startswith("/sys/") else Path(a) for a in argv[2:]]
    if argv[0] == "/bin/chgrp":
        eff.groups.update(dict.fromkeys(files, argv[1]))
    elif argv[:2] == ["/bin/chmod", "g+w"]:
        eff.writable.update(files)
    elif argv[:2] == ["/bin/chmod", "g+r"]:
        eff.readable.update(files)
    else:
        raise AssertionError(f"unexpected RUN command: {command}")
    if execute:
        subprocess.run([argv[0], argv[1], *map(str, files)], check=True)


# ---- devices the board trees lack --------------------------------------------------

def _node(root: Path, name: str) -> None:
    node = root / "dev" / name
    node.parent.mkdir(parents=True, exist_ok=True)
    node.write_text("")  # a stand-in for the character device
    node.chmod(0o600)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def add_gpio_chip(root: Path, n: int, label: str) -> None:
    dev = root / f"sys/devices/platform/gpio{n}/gpiochip{n}"
    dev.mkdir(parents=True)
    (dev / "dev").write_text(f"254:{n}\n")
    (dev / "label").write_text(label + "\n")
    _link(root / f"sys/bus/gpio/devices/gpiochip{n}", dev)
    _node(root, f"gpiochip{n}")


def add_usb_serial(root: Path, kernel: str, vendor: str, product: str, serial: str | None,
                   port: str) -> None:
    usb = root / f"sys/devices/pci0000:00/0000:00:14.0/usb1/{port}"
    usb.mkdir(parents=True)
    (usb / "idVendor").write_text(vendor + "\n")
    (usb / "idProduct").write_text(product + "\n")
    if serial:
        (usb / "serial").write_text(serial + "\n")
    tty = usb / f"{port}:1.0/tty/{kernel}"
    tty.mkdir(parents=True)
    (tty / "dev").write_text("166:0\n")
    _link(root / f"sys/class/tty/{kernel}", tty)
    _node(root, kernel)


def add_uart(root: Path, kernel: str) -> None:
    tty = root / f"sys/devices/platform/serial8250/tty/{kernel}"
    tty.mkdir(parents=True)
    (tty / "dev").write_text("4:64\n")
    _link(root / f"sys/class/tty/{kernel}", tty)
    _node(root, kernel)


def add_mali_node(root: Path) -> None:
    """The misc device node Amlogic's Mali driver makes beside /sys/class/mpgpu."""
    dev = root / "sys/devices/platform/ffe40000.gpu/misc/mali0"
    dev.mkdir(parents=True)
    (dev / "dev").write_text("10:58\n")
    _link(root / "sys/class/misc/mali0", dev)
    _node(root, "mali0")
