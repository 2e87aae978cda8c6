"""`coupprof boards --devices` and `coupprof doctor --devices`: the devices of a devices
file listed, and each checked (host reached, board found, power and marker valid), with
the exit codes of profiler/errors.py (2 bad input, 3 a host that cannot be reached); the
devices file's parse errors as one line each; the bundled examples sim2 and sim4.

Reachability is checked against real sockets on this machine (a listening port and a
closed one) and a name that never resolves (`.invalid`, RFC 6761).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from profiler.devices.check import BAD_INPUT, UNREACHABLE, check_devices, reach, reach_all
from profiler.devices.launch import launch, mpi_installed, rank_env
from profiler.devices.spec import parse_devices, read_devices
from profiler.errors import BadInputError
from tests.cli_runs import COUPPROF

REPO = Path(__file__).resolve().parents[1]


def coupprof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def write(tmp_path: Path, text: str, name: str = "devices.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the bundled examples ------------------------------------------------------------------
def test_bundled_examples_are_two_and_four_simulated_boards_on_a_gigabit_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # found by name, not as a file here
    two, four = read_devices("sim2"), read_devices("sim4")
    assert two.path == REPO / "data" / "devices" / "sim2.toml"
    assert [(d.name, d.host, d.board, d.cores) for d in two.devices] == [
        ("d0", "localhost", "sim", (0,)), ("d1", "localhost", "sim", (1,))]
    assert [d.cores for d in four.devices] == [(0,), (1,), (0,), (1,)]  # two share each core
    for devices in (two, four):
        assert all(d.local and d.power is None for d in devices.devices)
        link = devices.link("d0", "d1")
        assert (link.latency_ms, link.bandwidth_mb_s) == (0.2, 117.0) and not devices.links
        # a 117 kB tensor: 0.2 ms + 1 ms on the wire
        assert link.modelled_ms(117_000) == pytest.approx(1.2)
    with pytest.raises(BadInputError, match="sim2, sim4"):
        read_devices("sim3")


def test_boards_lists_the_devices_and_every_link(tmp_path: Path) -> None:
    res = coupprof("boards", "--devices", "sim4", "--wide", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = {line.split()[0]: line.split() for line in res.stdout.splitlines()
            if line.split()[1:2] == ["localhost"]}
    for name, core in (("d0", "0"), ("d1", "1"), ("d2", "0"), ("d3", "1")):
        row = rows[name]
        assert row[1:4] == ["localhost", "(local)", "sim"] and "L B G N" in " ".join(row)
        assert row[-1] == core and "sim (default)" in " ".join(row)
    pairs = [line.split() for line in res.stdout.splitlines() if " - d" in line]
    assert len(pairs) == 6 and all(p[3:5] == ["0.2", "117"] for p in pairs)


# -- doctor --devices: exit codes ------------------------------------------------------------
def test_doctor_passes_the_bundled_two_board_file(tmp_path: Path) -> None:
    res = coupprof("doctor", "--devices", "sim2", cwd=tmp_path)
    if not mpi_installed():  # MPI is an extra: without it, bad input as `run` says
        assert res.returncode == 2 and "MPI is not installed" in res.stderr
        return
    assert res.returncode == 0, res.stderr
    assert "all 2 devices can be used" in res.stdout and res.stderr == ""


@pytest.mark.parametrize(("text", "code", "says"), [
    # an unknown board: bad input
    ('[[device]]\nname = "d0"\n[[device]]\nname = "d1"\nboard = "nosuch"\n', 2,
     ["device d1 (localhost): unknown board 'nosuch'"]),
    # a host that does not resolve: cannot be reached (exit 2, as issue 27 asks)
    ('[[device]]\nname = "d0"\n[[device]]\nname = "far"\nhost = "nohost.invalid"\n', 2,
     ["device far (nohost.invalid): host nohost.invalid does not resolve"]),
    # both: exit 2, one line per device
    ('[[device]]\nname = "d0"\nboard = "nosuch"\n[[device]]\nname = "far"\n'
     'host = "nohost.invalid"\n', 2,
     ["device d0 (localhost): unknown board", "device far (nohost.invalid): host"]),
])
def test_doctor_names_each_unusable_device_and_exits_non_zero(
        tmp_path: Path, text: str, code: int, says: list[str]) -> None:
    res = coupprof("doctor", "--devices", str(write(tmp_path, text)), cwd=tmp_path)
    assert res.returncode == code, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == len(says) and "Traceback" not in res.stderr
    for line, words in zip(lines, says, strict=True):
        assert line.startswith("coupprof doctor: ") and words in line
    assert "PROBLEM" in res.stdout


@pytest.mark.parametrize(("command", "name"), [("doctor", "missing.toml"),
                                                ("boards", "missing.toml")])
def test_a_missing_devices_file_is_one_line_exit_2(tmp_path: Path, command: str,
                                                   name: str) -> None:
    res = coupprof(command, "--devices", name, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "devices file not found: missing.toml" in res.stderr
    assert res.stdout == ""


# -- the checks themselves ---------------------------------------------------------------------
def test_reach_answers_for_a_listening_port_and_not_for_a_closed_one() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        ok = reach("127.0.0.1", port=port, timeout_s=2.0)
        assert ok.ok and f"TCP port {port}" in ok.detail
    closed = reach("127.0.0.1", port=port, timeout_s=2.0)  # nothing listens now
    assert closed.ok is False and closed.exit_code == UNREACHABLE
    assert "refused" in closed.detail
    gone = reach_all(["nohost.invalid", "nohost.invalid"], timeout_s=1.0)
    assert list(gone) == ["nohost.invalid"] and gone["nohost.invalid"].exit_code == UNREACHABLE


def test_each_bad_device_entry_is_its_own_problem() -> None:
    devices = parse_devices("""
[[device]]
name = "ok"
cores = [0]
[[device]]
name = "cores"
cores = [4096]
[[device]]
name = "power"
power = "bogus:1"
[[device]]
name = "marker"
power = "sim"
marker = "sim:9"
[[device]]
name = "realsim"
board = "rk3399pro"
power = "sim"
""")
    report = check_devices(devices)
    problems = {r.device.name: [(c.what, c.exit_code) for c in r.problems]
                for r in report.reports}
    assert problems == {"ok": [], "cores": [("cores", BAD_INPUT)],
                        "power": [("power", BAD_INPUT)], "marker": [("marker", BAD_INPUT)],
                        "realsim": [("power", BAD_INPUT)]}
    by_name = {r.device.name: r for r in report.reports}
    assert "4096" in by_name["cores"].problems[0].detail
    assert "bogus:1" in by_name["power"].problems[0].detail
    assert "sim:9" in by_name["marker"].problems[0].detail
    assert "simulated board" in by_name["realsim"].problems[0].detail
    assert report.exit_code == BAD_INPUT


# -- the devices file's own errors (profiler/devices/spec.py) -----------------------------------
PARSE_ERRORS = [
    ("[[device]\nname = 'd0'\n", "is not valid TOML"),
    ("[[device]]\nname = 'd0'\n[boards]\nx = 1\n", "unknown section(s) boards"),
    ("[[link]]\nlatency_ms = 1\n", "lists no [[device]]"),
    ("[[device]]\nname = 'd0'\nport = 22\n", "device 1: unknown key(s) port"),
    ("[[device]]\nname = '0d'\n", "device 1: name must be a word"),
    ("[[device]]\nname = 'd0'\n[[device]]\nname = 'd0'\n", "device 'd0' is listed twice"),
    ("[[device]]\nname = 'd0'\nhost = 5\n", "device 1 (d0): host must be a string"),
    ("[[device]]\nname = 'd0'\ncores = [-1]\n", "cores must be a list of host core numbers"),
    ("[[device]]\nname = 'd0'\nenv = { GPU = 1 }\n", "env must be a table of strings"),
    ("[[device]]\nname = 'd0'\nenv = 'DRI_PRIME=1'\n", "env must be a table of strings"),
    ("[[device]]\nname = 'd0'\n[[link]]\nlatency = 1\n", "link 1: unknown key(s) latency"),
    ("[[device]]\nname = 'd0'\n[[link]]\nlatency_ms = -1\n", "latency_ms must be a number >= 0"),
    ("[[device]]\nname = 'd0'\n[[link]]\nbandwidth_mb_s = 0\n", "bandwidth_mb_s must be a number > 0"),
    ("[[device]]\nname = 'd0'\n[[link]]\nbetween = ['d0']\n", "between must name two devices"),
    ("[[device]]\nname = 'd0'\n[[link]]\nbetween = ['d0', 'd9']\n", "device 'd9' is not listed"),
]


@pytest.mark.parametrize(("text", "says"), PARSE_ERRORS)
def test_devices_file_errors_are_one_line_bad_input(text: str, says: str) -> None:
    with pytest.raises(BadInputError) as err:
        parse_devices(text, Path("lab.toml"))
    assert err.value.exit_code == 2
    assert says in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("lab.toml")


@pytest.mark.parametrize(("command", "case"), [("doctor", 0), ("boards", 7)])
def test_devices_file_errors_reach_the_cli_as_one_line_exit_2(tmp_path: Path, command: str,
                                                              case: int) -> None:
    text, says = PARSE_ERRORS[case]
    res = coupprof(command, "--devices", str(write(tmp_path, text)), cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and says in res.stderr and "Traceback" not in res.stderr
    assert res.stdout == ""


def test_a_devices_env_reaches_its_rank_from_the_start(tmp_path: Path) -> None:
    """Each rank sees its own device's variables in its *start-up* environment
    (/proc/self/environ, what the dynamic loader read), not only in os.environ; the
    other rank does not see them."""
    if not mpi_installed():
        pytest.skip("MPI not installed (the devices extra)")
    devices = parse_devices(
        "[[device]]\nname = 'd0'\nenv = { COUPPROF_T_GPU = 'pci-0000_00_07_0', "
        "LD_LIBRARY_PATH = '/opt/vk' }\n[[device]]\nname = 'd1'\n"
        "env = { COUPPROF_T_GPU = 'pci-0000_00_06_0' }\n")
    assert devices.devices[0].env == (("COUPPROF_T_GPU", "pci-0000_00_07_0"),
                                       ("LD_LIBRARY_PATH", "/opt/vk"))
    probe = tmp_path / "probe_env.py"
    probe.write_text(
        "import os, sys\n"
        "start = dict(e.split('=', 1) for e in open('/proc/self/environ').read().split('\\0') if e)\n"
        "rank = os.environ['PMI_RANK']\n"
        "open(sys.argv[1] + '/env-' + rank, 'w').write(\n"
        "    start.get('COUPPROF_T_GPU', '-') + ' ' + start.get('LD_LIBRARY_PATH', '-'))\n")
    res = launch("probe_env", [str(tmp_path)], 2, envs=[dict(d.env) for d in devices.devices],
                 env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
                 timeout_s=60, echo=False)
    assert res.ok, res.log
    assert (tmp_path / "env-0").read_text() == "pci-0000_00_07_0 /opt/vk"
    assert (tmp_path / "env-1").read_text() == "pci-0000_00_06_0 -"


def test_ranks_run_as_root_under_open_mpi_too() -> None:
    """CI runs as root, which Open MPI's mpiexec refuses unless told; MPICH ignores it."""
    env = rank_env()
    if os.geteuid() == 0:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    else:
        assert "OMPI_ALLOW_RUN_AS_ROOT" not in env
    assert env["PYTHONUNBUFFERED"] == "1"
