"""Several devices, one model: the devices file and a mapping across devices.

A lab that runs one model across boards (AutoDiCE's setting) lists its devices in a
TOML file: each device's name, the host MPI reaches it on, its board profile, its
power source and marker line, and (for simulated boards sharing one machine) its own
sysfs tree and host cores. Links between devices carry a modelled latency and
bandwidth where they are simulated. A device mapping names a device and a processor
per layer (``d0:B4G3 d1:B8``): each token is a device and an ordinary `--order`
string for that device's consecutive layers.

The format, with an example: docs/devices.md.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from profiler.errors import BadInputError
from profiler.mapping.spec import Mapping, parse_order

DEVICES_FIX = "see docs/devices.md for the devices file's form"
DEVICE_ORDER_FIX = ("write one DEVICE:ORDER token per run of layers on one device, e.g. "
                    "--order 'd0:B4G3 d1:B8' (ORDER as a one-board --order)")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Device:
    """One board that runs part of the model: an MPI rank's host and its hardware."""

    name: str
    host: str = "localhost"
    board: str = "sim"
    power: str | None = None      # a --power SPEC (its own logger or counter); None: none
    marker: str | None = None     # a --marker SPEC
    sysfs_root: str | None = None  # its own sysfs tree (simulated boards on one machine)
    cores: tuple[int, ...] = ()   # host cores its rank is pinned to (empty: any)
    # variables set in its rank's environment before it starts (e.g. which GPU it uses)
    env: tuple[tuple[str, str], ...] = ()

    @property
    def local(self) -> bool:
        return self.host in ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Link:
    """What a hand-over between two devices adds to the real transfer: `latency_ms` plus
    bytes over `bandwidth_mb_s` (MB = 1e6 bytes). A link with neither adds nothing (a
    real link, measured as it is)."""

    latency_ms: float = 0.0
    bandwidth_mb_s: float | None = None

    @property
    def simulated(self) -> bool:
        return self.latency_ms > 0 or self.bandwidth_mb_s is not None

    def modelled_ms(self, nbytes: int) -> float:
        """The time this link's model adds to a hand-over of `nbytes`."""
        wire = 0.0 if self.bandwidth_mb_s is None else nbytes / (self.bandwidth_mb_s * 1e3)
        return self.latency_ms + wire


@dataclass(frozen=True)
class DeviceSet:
    """The devices of a devices file, in rank order, and the links between them."""

    devices: tuple[Device, ...]
    default_link: Link = Link()
    links: dict[frozenset[str], Link] = field(default_factory=dict)
    path: Path | None = None

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        where = f" in {self.path}" if self.path else ""
        raise BadInputError(f"device {name!r} is not{where} (it lists: {', '.join(self.names)})",
                            "name a device the devices file lists")

    def rank(self, name: str) -> int:
        return self.names.index(self.device(name).name)

    def link(self, a: str, b: str) -> Link:
        return self.links.get(frozenset((a, b)), self.default_link)


def _link(table: dict[str, object], where: str) -> Link:
    unknown = set(table) - {"latency_ms", "bandwidth_mb_s", "between"}
    if unknown:
        raise BadInputError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}", DEVICES_FIX)
    lat = table.get("latency_ms", 0.0)
    bw = table.get("bandwidth_mb_s")
    if not isinstance(lat, int | float) or lat < 0:
        raise BadInputError(f"{where}: latency_ms must be a number >= 0", DEVICES_FIX)
    if bw is not None and (not isinstance(bw, int | float) or bw <= 0):
        raise BadInputError(f"{where}: bandwidth_mb_s must be a number > 0", DEVICES_FIX)
    return Link(float(lat), None if bw is None else float(bw))


def _cores(value: object, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.replace(" ", "").split(",") if v]
        except ValueError:
            value = None
    if not isinstance(value, list) or not all(isinstance(c, int) and c >= 0 for c in value):
        raise BadInputError(f"{where}: cores must be a list of host core numbers, e.g. [0, 1]",
                            DEVICES_FIX)
    return tuple(value)


def _env(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if (not isinstance(value, dict)
            or not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)
                       and isinstance(v, str) for k, v in value.items())):
        raise BadInputError(f"{where}: env must be a table of strings, e.g. "
                            "env = { DRI_PRIME = \"pci-0000_00_07_0\" }", DEVICES_FIX)
    return tuple(sorted(value.items()))


def parse_devices(text: str, path: Path | None = None) -> DeviceSet:
    """Read a devices file's text; every mistake is one `BadInputError` line."""
    where = str(path) if path else "devices file"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInputError(f"{where} is not valid TOML: {e}", DEVICES_FIX) from None
    unknown = set(doc) - {"device", "link"}
    if unknown:
        raise BadInputError(f"{where}: unknown section(s) {', '.join(sorted(unknown))}",
                            DEVICES_FIX)
    rows = doc.get("device")
    if not isinstance(rows, list) or not rows:
        raise BadInputError(f"{where} lists no [[device]]", DEVICES_FIX)
    devices: list[Device] = []
    for k, row in enumerate(rows):
        at = f"{where}: device {k + 1}"
        keys = {"name", "host", "board", "power", "marker", "sysfs_root", "cores", "env"}
        if set(row) - keys:
            raise BadInputError(f"{at}: unknown key(s) {', '.join(sorted(set(row) - keys))}",
                                DEVICES_FIX)
        name = row.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise BadInputError(f"{at}: name must be a word such as 'd0'", DEVICES_FIX)
        if name in (d.name for d in devices):
            raise BadInputError(f"{where}: device {name!r} is listed twice", DEVICES_FIX)
        for key in ("host", "board", "power", "marker", "sysfs_root"):
            if key in row and not isinstance(row[key], str):
                raise BadInputError(f"{at} ({name}): {key} must be a string", DEVICES_FIX)
        devices.append(Device(name, row.get("host", "localhost"), row.get("board", "sim"),
                              row.get("power"), row.get("marker"), row.get("sysfs_root"),
                              _cores(row.get("cores"), f"{at} ({name})"),
                              _env(row.get("env"), f"{at} ({name})")))
    default = Link()
    links: dict[frozenset[str], Link] = {}
    link_rows = doc.get("link", [])
    if isinstance(link_rows, dict):
        link_rows = [link_rows]
    for k, row in enumerate(link_rows):
        at = f"{where}: link {k + 1}"
        between = row.get("between")
        if between is None:
            default = _link(row, at)
            continue
        if (not isinstance(between, list) or len(between) != 2
                or not all(isinstance(b, str) for b in between)):
            raise BadInputError(f"{at}: between must name two devices, e.g. ['d0', 'd1']",
                                DEVICES_FIX)
        for b in between:
            if b not in (d.name for d in devices):
                raise BadInputError(f"{at}: device {b!r} is not listed", DEVICES_FIX)
        links[frozenset(between)] = _link(row, at)
    return DeviceSet(tuple(devices), default, links, path)


def bundled_devices() -> dict[str, Path]:
    """The example devices files that ship with coupprof (data/devices/), by name."""
    from profiler.resources import devices_dir

    return {p.stem: p for p in sorted(devices_dir().glob("*.toml"))}


def read_devices(path: str | Path) -> DeviceSet:
    """A devices file by path, or a bundled example by name (``sim2``) where no such
    file exists."""
    p = Path(path)
    if not p.exists() and p.name == str(path) and not p.suffix:
        p = bundled_devices().get(p.name, p)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise BadInputError(f"devices file not found: {p}",
                            f"give a devices file's path or a bundled one "
                            f"({', '.join(bundled_devices())}); {DEVICES_FIX}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise BadInputError(f"cannot read devices file {p}: {e}", DEVICES_FIX) from None
    return parse_devices(text, p)


@dataclass(frozen=True)
class DevicePart:
    """Consecutive layers ``first .. first + len(mapping) - 1`` of the model on one
    device, with the device's own processor order for them."""

    device: str
    first: int
    mapping: Mapping

    @property
    def layers(self) -> range:
        return range(self.first, self.first + self.mapping.n_layers)

    @property
    def last(self) -> int:
        return self.first + self.mapping.n_layers - 1


@dataclass(frozen=True)
class DeviceMapping:
    """A device and a processor per layer, as consecutive parts (one rank each)."""

    parts: tuple[DevicePart, ...]

    @property
    def n_layers(self) -> int:
        return sum(p.mapping.n_layers for p in self.parts)

    @property
    def devices(self) -> list[str]:
        """Devices used, in order of first use."""
        return list(dict.fromkeys(p.device for p in self.parts))

    @property
    def cuts(self) -> list[int]:
        """Boundaries between devices (b: between layer b and b + 1)."""
        return [p.last for p in self.parts[:-1]]

    @property
    def text(self) -> str:
        return " ".join(f"{p.device}:{p.mapping.compact}" for p in self.parts)


def parse_device_order(text: str, n_layers: int, devices: DeviceSet) -> DeviceMapping:
    """``d0:B4G3 d1:B8`` -> parts; each device's processors are checked against its
    board by the caller (the board is loaded on the rank that runs it)."""
    tokens = (text or "").split()
    if not tokens:
        raise BadInputError(f"--order is empty but the model has {n_layers} layers",
                            DEVICE_ORDER_FIX)
    parts: list[DevicePart] = []
    first = 0
    for tok in tokens:
        dev, sep, order = tok.partition(":")
        if not sep or not order:
            raise BadInputError(f"--order token {tok!r} is not DEVICE:ORDER", DEVICE_ORDER_FIX)
        devices.device(dev)
        # parse_order checks the letters; the count is checked as a whole below
        letters = _letters(order, tok)
        m = parse_order(letters, len(letters))
        if parts and parts[-1].device == dev:
            merged = Mapping(parts[-1].mapping.order + m.order)
            parts[-1] = DevicePart(dev, parts[-1].first, merged)
        else:
            if dev in (p.device for p in parts):
                raise BadInputError(f"--order uses device {dev!r} twice, apart",
                                    "give each device one run of consecutive layers")
            parts.append(DevicePart(dev, first, m))
        first += m.n_layers
    if first != n_layers:
        raise BadInputError(f"--order {text!r} maps {first} layers but the model has "
                            f"{n_layers} layers",
                            f"give exactly {n_layers} layers (`coupprof slice MODEL` lists them)")
    return DeviceMapping(tuple(parts))


def _letters(order: str, tok: str) -> str:
    out = ""
    for letter, count in re.findall(r"([A-Za-z])(\d*)", order):
        out += letter.upper() * (int(count) if count else 1)
    if not re.fullmatch(r"(?:[A-Za-z]\d*)+", order) or not out:
        raise BadInputError(f"--order token {tok!r}: {order!r} is not an order such as B4G3",
                            DEVICE_ORDER_FIX)
    return out
