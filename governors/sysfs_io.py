"""Reading and writing sysfs attribute files, with OS errors turned into coupprof errors.

Every governor goes through one `SysfsIO`, so a permission problem always names
the file and the fix, and tests (or the simulated kernel) can watch each write
through the `on_write` hook.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

# The sysfs root is found where the `host` board reads it; governors use the same one.
from profiler.boards.host import SYSFS_ROOT_ENV, sysfs_root_from_env
from profiler.errors import GovernorError, HardwareError, PermissionDeniedError

__all__ = ["SYSFS_ROOT_ENV", "SysfsIO", "WriteHook", "sysfs_root_from_env"]


WriteHook = Callable[[Path, str], None]


class SysfsIO:
    """Reads and writes attribute files below `root`.

    Paths given to `read`/`write` are relative to the root (or absolute).
    `on_write(path, value)` runs after every successful write.
    """

    def __init__(self, root: Path, on_write: WriteHook | None = None) -> None:
        self.root = Path(root)
        self.on_write = on_write

    def path(self, rel: str | Path) -> Path:
        p = Path(rel)
        return p if p.is_absolute() else self.root / p

    def exists(self, rel: str | Path) -> bool:
        return self.path(rel).exists()

    def read(self, rel: str | Path) -> str:
        """The file's text, stripped (sysfs values end in a newline)."""
        return self.read_raw(rel).decode(errors="replace").strip().strip("\x00")

    def read_raw(self, rel: str | Path) -> bytes:
        p = self.path(rel)
        try:
            return p.read_bytes()
        except OSError as err:
            raise _translate(err, p, "read") from None

    def read_int(self, rel: str | Path) -> int:
        text = self.read(rel)
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            raise GovernorError(f"{self.path(rel)} holds '{text}', not a number",
                                "check that the board profile points at the right sysfs file"
                                " (`coupprof boards show NAME`)") from None

    def read_ints(self, rel: str | Path) -> list[int]:
        """Whitespace-separated integers (e.g. available_frequencies)."""
        out = []
        for tok in self.read(rel).split():
            try:
                out.append(int(tok))
            except ValueError:
                continue  # some kernels append notes such as "(boost)"
        return out

    def write(self, rel: str | Path, value: str | int) -> None:
        """Write one value the way `echo VALUE > FILE` does (one write call)."""
        p = self.path(rel)
        data = f"{value}\n".encode()
        try:
            # No O_CREAT: a missing sysfs attribute is an error, never a new file.
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        except OSError as err:
            raise _translate(err, p, "write", value) from None
        try:
            os.write(fd, data)
        except OSError as err:
            raise _translate(err, p, "write", value) from None
        finally:
            os.close(fd)
        if self.on_write is not None:
            self.on_write(p, str(value))


def _translate(err: OSError, path: Path, action: str, value: object = None) -> Exception:
    what = f"cannot {action} {path}" + (f" (value {value})" if value is not None else "")
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PermissionDeniedError(
            f"{what}: permission denied",
            "grant write access to a group of yours with the udev rule `coupprof doctor "
            "--board NAME --udev` prints (root installs it once), or run as root"
            if action == "write" else f"run as root or grant read access to {path}",
        )
    if err.errno == errno.ENOENT:
        return HardwareError(
            f"{what}: no such file",
            "this machine lacks the sysfs file the board profile names; pick the right board"
            " with --board (see `coupprof boards`) or check that the driver is loaded",
        )
    if err.errno == errno.EINVAL:
        return GovernorError(f"{what}: the kernel rejected the value (EINVAL)",
                             "use a level from the board's frequency table (`coupprof boards show`)")
    if err.errno == errno.EISDIR:
        return HardwareError(f"{what}: it is a directory, not an attribute file",
                             "check the governor path in the board profile")
    return HardwareError(f"{what}: {err.strerror or err}",
                         "check the board profile's sysfs paths (`coupprof doctor`)")
