"""coupprof installed as a package, not as the editable checkout setup.sh makes.

The source tree (git's files, as a fresh clone has them) is copied to a temporary
folder; `python -m build` makes the sdist and, from it, the wheel. A clean virtual
environment outside the checkout gets the wheel with its dependencies (pip's cache
makes that quick where setup.sh ran). The README's commands then run there as
subprocesses from a folder with no checkout; the same commands run again after
`pip install .` from the copied tree replaced the wheel.

Builds and installs work on the copy, so nothing is written into the shared checkout
(a stale build/lib would leak into a wheel built in place).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from setuptools import find_packages

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
# Every bundled profile and the default model must ship; read from the checkout's data/.
BOARD_FILES = sorted(p.name for p in (REPO / "data" / "boards").glob("*.toml"))
DEVICES_FILES = sorted(p.name for p in (REPO / "data" / "devices").glob("*.toml"))
MODEL_FILE = "mobilenet_v1_0.25_128.tflite"
DEFAULT_MODEL_LAYERS = 15  # the default model's layer groups (README's worked example)
INSTALL_TIMEOUT_S = 600


def _pyproject() -> dict[str, Any]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_pyproject_lists_every_package() -> None:
    """`packages` is listed by hand (find cannot see profiler.data, which is data/): a new
    subpackage missing from it would be left out of the wheel."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = set(find_packages(str(REPO), include=["profiler*", "governors*"]))
    data = {"profiler.data", "profiler.data.boards", "profiler.data.devices",
            "profiler.data.models"}
    assert listed == found | data, (
        f"add to [tool.setuptools] packages in pyproject.toml: {sorted(found - listed)}; "
        f"no such package: {sorted(listed - found - data)}")


# ---- the installed package ------------------------------------------------------------


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = INSTALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (f"{' '.join(proc.args)} exited {proc.returncode}\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def _pip(venv_python: Path, *args: str, cwd: Path) -> str:
    # The checkout's pip installs into the clean venv (--python), so the venv holds
    # nothing but coupprof and its dependencies; no ensurepip, no pip upgrade.
    return _ok(_run([sys.executable, "-m", "pip", "--python", str(venv_python),
                     "--disable-pip-version-check", "install", "-q", *args], cwd=cwd))


@dataclass
class Artifacts:
    source: Path  # the copied tree, what a fresh clone holds
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    """The tree git knows (tracked and not ignored) copied out, then sdist and wheel."""
    source = tmp_path_factory.mktemp("source") / "coupprof"
    listed = _ok(_run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                      cwd=REPO, timeout=60))
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():  # a tracked file deleted in the working tree is skipped
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, source / rel)
    dist = tmp_path_factory.mktemp("dist")
    # Without isolation: the test extra brings build and setuptools>=77 into .venv.
    _ok(_run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), "."],
             cwd=source))
    (wheel,) = dist.glob("coupprof-*.whl")
    (sdist,) = dist.glob("coupprof-*.tar.gz")
    return Artifacts(source, wheel, sdist)


@pytest.mark.slow
def test_wheel_holds_the_package_data_and_nothing_else_from_data(artifacts: Artifacts) -> None:
    names = zipfile.ZipFile(artifacts.wheel).namelist()
    boards = sorted(Path(n).name for n in names if n.startswith("profiler/data/boards/"))
    assert boards == BOARD_FILES
    devices = sorted(Path(n).name for n in names if n.startswith("profiler/data/devices/"))
    assert devices == DEVICES_FILES and "sim2.toml" in devices
    assert f"profiler/data/models/{MODEL_FILE}" in names
    assert "profiler/data/__init__.py" in names
    assert not [n for n in names if "validation" in n], "data/validation must stay out"
    assert not [n for n in names if n.startswith(("data/", "tests/", "firmware/"))]
    data = [n for n in names if n.startswith("profiler/data/")]
    assert {Path(n).suffix for n in data} == {".py", ".toml", ".tflite"}, data
    # Every module of the source tree is in the wheel (the package list is complete).
    modules = {p.relative_to(REPO).as_posix() for top in ("profiler", "governors")
               for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts}
    assert modules - set(names) == set()


@dataclass
class Install:
    kind: str
    python: Path
    coupprof: Path
    cwd: Path  # a folder with no checkout
    env: dict[str, str]


@pytest.fixture(scope="module")
def clean_venv(artifacts: Artifacts,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """A clean venv outside the checkout with the wheel and its dependencies installed."""
    root = tmp_path_factory.mktemp("venv")
    venv = root / "venv"
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root))
    python = venv / "bin" / "python"
    _pip(python, str(artifacts.wheel), cwd=root)
    cwd = root / "work"
    cwd.mkdir()
    # Nothing may lead the installed coupprof back to the checkout or its settings.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COUPPROF_", "PYTHON", "VIRTUAL_ENV"))}
    env["COUPPROF_CACHE"] = str(root / "cache")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    yield Install("wheel", python, venv / "bin" / "coupprof", cwd, env)
    shutil.rmtree(venv, ignore_errors=True)  # ~340 MB; pytest keeps its last 3 tmp roots


@pytest.fixture(scope="module", params=["wheel", "pip install ."])
def installed(request: pytest.FixtureRequest, clean_venv: Install,
              artifacts: Artifacts) -> Install:
    """The same clean venv, first with the wheel, then with `pip install .` in its place
    (dependencies already there: only coupprof is built and installed again)."""
    if request.param == "pip install .":
        _ok(_run([str(sys.executable), "-m", "pip", "--python", str(clean_venv.python),
                  "uninstall", "-y", "-q", "coupprof"], cwd=clean_venv.cwd))
        # Build isolation as a user gets it: setuptools>=77 from the index (or pip's cache).
        _pip(clean_venv.python, ".", cwd=artifacts.source)
    return Install(request.param, clean_venv.python, clean_venv.coupprof, clean_venv.cwd,
                   clean_venv.env)


def _coupprof(inst: Install, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([str(inst.coupprof), *args], cwd=inst.cwd, env=inst.env, timeout=300)



@pytest.mark.slow
def test_installed_package_is_not_the_checkout(installed: Install) -> None:
    out = _ok(_run([str(installed.python), "-c",
                    "import profiler, profiler.resources as r; "
                    "print(profiler.__file__); print(r.data_dir())"],
                   cwd=installed.cwd, env=installed.env))
    module, data = (Path(line) for line in out.splitlines())
    site = installed.python.parent.parent
    assert module.is_relative_to(site) and data.is_relative_to(site), out
    assert data == module.parent / "data"


@pytest.mark.slow
def test_boards_lists_the_bundled_profiles(installed: Install) -> None:
    out = _ok(_coupprof(installed, "boards"))
    for name in (*(Path(b).stem for b in BOARD_FILES), "host"):
        assert f" {name} " in out, out


@pytest.mark.slow
def test_boards_show_reads_the_profile_from_the_package(installed: Install) -> None:
    out = _ok(_coupprof(installed, "boards", "show", "rk3399pro"))
    assert "Cortex-A72 x2" in out and "Mali-T860 MP4" in out
    assert "1800 / 1200" in out  # B's top DVFS level: MHz / mV from the .toml
    assert "site-packages/profiler/data/boards/rk3399pro.toml" in out.replace("\n", "")


@pytest.mark.slow
def test_zoo_lists_the_models(installed: Install) -> None:
    out = _ok(_coupprof(installed, "zoo", "--list"))
    for name in ("mobilenet_v1", "mobilenet_v1_int8", "resnet50", "googlenet", "squeezenet",
                 "alexnet"):
        assert f" {name} " in out, out


@pytest.mark.slow
def test_layers_runs_the_bundled_model_on_the_sim_board(installed: Install) -> None:
    out_dir = installed.cwd / f"out-{installed.kind.replace(' ', '-')}"
    # G's fused rounds fixed at 5 (the adaptive default makes 30 here, 15 s more): the
    # installed package's data, model and energy, not the rows' precision.
    proc = _coupprof(installed, "layers", "--processor", "G", "--freq", "4", "--frames", "3",
                     "--warmup", "1", "--min-rounds", "5", "--max-rounds", "5",
                     "--csv", str(out_dir / "layers.csv"))
    _ok(proc)
    assert "using the simulated board 'sim'" in proc.stderr
    with open(out_dir / "layers.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "layer"]
    assert len(rows) == DEFAULT_MODEL_LAYERS
    assert {r["board"] for r in rows} == {"sim"}
    assert {r["model"] for r in rows} == {Path(MODEL_FILE).stem}
    assert {r["freq_khz"] for r in rows} == {"600000"}
    assert all(float(r["energy_mj"]) > 0 for r in rows)
    assert (out_dir / "layers.json").is_file()


@pytest.mark.slow
def test_doctor_finds_no_problem(installed: Install) -> None:
    out = _ok(_coupprof(installed, "doctor"))
    assert "ai-edge-litert" in out and "sim" in out
    assert "no problems found" in out


@pytest.mark.slow
def test_rig_outside_a_checkout_says_what_is_missing(installed: Install) -> None:
    """No command of the package needs the simavr rig (only tests and benchmarks/ do), but
    its lookup must say, in one line, what is missing and how to get it."""
    code = ("from profiler.power.rig import INA226_ELF, missing; "
            "print(missing(INA226_ELF))")
    out = _ok(_run([str(installed.python), "-c", code], cwd=installed.cwd, env=installed.env))
    assert out.count("\n") == 1 and "COUPPROF_SOURCE_DIR" in out and "clone" in out, out
    # Pointed at a checkout, it looks there: the rig is found, or its build is named.
    env = {**installed.env, "COUPPROF_SOURCE_DIR": str(REPO)}
    out = _ok(_run([str(installed.python), "-c", code], cwd=installed.cwd, env=env))
    assert out.strip() == "None" or "make -C firmware" in out, out


def test_a_checkout_run_without_installing_finds_its_data() -> None:
    """PYTHONPATH=checkout, nothing installed (how benchmarks run on a borrowed GPU
    machine): the package-dir mapping does not exist there, so data/ is read in place."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from profiler.resources import boards_dir, default_model_file; "
            "print(boards_dir()); print(default_model_file().is_file())")
    # -S: no site-packages, so no editable-install finder either
    r = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True,
                       text=True, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(REPO / "data" / "boards"), "True"]
