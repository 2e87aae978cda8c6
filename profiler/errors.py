"""The project's exceptions.

Every error a user can cause or fix is a `ProfilerError`. Vendor and OS errors
(LiteRT, pyserial, gpiod, sysfs) are translated into these once, at the boundary
where they are raised, with a message that says what failed, which file or port,
and what to do about it. The CLI prints `str(err)` on one line and exits with
`err.exit_code`.

Exit codes (documented in README and `coupprof --help`):

    0  success
    1  a check failed (e.g. `slice --verify` found a mismatch)
    2  bad input: arguments, files, models, board profiles
    3  hardware or permission problem (sysfs not writable, GPIO busy, no serial port)
    4  the power logger failed mid-run (port vanished, logger silent); partial
       results were written
    130 interrupted (Ctrl-C); partial results were written, frequencies restored
"""

from __future__ import annotations

from typing import Any


class ProfilerError(Exception):
    """Root of all coupprof errors. `fix` is an optional hint appended to the message."""

    exit_code = 2

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return f"{self.message}; {self.fix}" if self.fix else self.message


class BadInputError(ProfilerError):
    """Bad arguments or files given by the user."""


class ModelError(BadInputError):
    """A .tflite file that cannot be read, sliced or run."""


class BoardError(BadInputError):
    """Unknown or invalid board profile, processor or frequency level."""


class RuntimeUnavailableError(ProfilerError):
    """The inference runtime or an accelerator is missing."""

    exit_code = 3


class HardwareError(ProfilerError):
    """A device file, GPIO line or port could not be used."""

    exit_code = 3


class PermissionDeniedError(HardwareError):
    """A sysfs/GPIO file exists but is not writable."""


class GovernorError(HardwareError):
    """A DVFS governor could not set or restore a frequency."""


class MarkerError(HardwareError):
    """A GPIO marker line could not be requested or driven."""


class PowerSourceError(ProfilerError):
    """A power source failed. Raised mid-run, partial results are kept."""

    exit_code = 4
    #: A streaming source's capture up to the failure (a `profiler.power.trace.DeviceTrace`
    #: on the logger's clock), where it kept one. Any: the root module imports nothing of the
    #: project, not even for a type (a TYPE_CHECKING import would close a module cycle).
    trace: Any = None


class LoggerTimeoutError(PowerSourceError):
    """The logger never answered a command."""


class PortLostError(PowerSourceError):
    """The serial port vanished while streaming."""


class VerificationError(ProfilerError):
    """A check (e.g. chained sub-models vs whole model) failed."""

    exit_code = 1


class LayoutMismatchError(ProfilerError):
    """A recording's marker segments do not fit the layout given or assumed (`coupprof
    import`): nothing is written, and the message names the layout the trace shows."""

    exit_code = 1
