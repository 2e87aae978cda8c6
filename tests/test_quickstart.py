"""Every command in docs/quickstart.md runs, in order, in an empty folder, as a newcomer
would type it (through a shell, so its pipes work): the page cannot rot unseen."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).resolve().parents[1] / "docs" / "quickstart.md"


def quickstart_commands(text: str) -> list[str]:
    """The lines of the page's ```sh blocks, in order."""
    blocks = re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)
    return [line for b in blocks for line in b.splitlines() if line.strip()]


def test_the_page_has_the_commands_it_promises() -> None:
    cmds = quickstart_commands(QUICKSTART.read_text())
    assert all(c.startswith("coupprof ") for c in cmds), cmds
    used = {c.split()[1] for c in cmds}
    assert {"doctor", "layers", "transfer-matrix", "predict", "run", "sweep", "explore",
            "plot", "report"} <= used


@pytest.mark.slow
def test_every_quickstart_command_runs(tmp_path: Path) -> None:
    env = dict(os.environ)
    # the coupprof beside this interpreter, as `source .venv/bin/activate` gives it
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for cmd in quickstart_commands(QUICKSTART.read_text()):
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        assert "Traceback" not in r.stderr, f"{cmd}\n{r.stderr[-2000:]}"
    out = tmp_path / "coupprof-out"
    assert (out / "efficiency.png").stat().st_size > 0
    assert (out / "sweep" / "sweep.csv").is_file()
    assert list(out.glob("report*.md")) or list(out.glob("*.md")), sorted(os.listdir(out))


def test_the_readme_opens_with_the_two_commands_and_what_they_print() -> None:
    readme = (QUICKSTART.parents[1] / "README.md").read_text().splitlines()
    first = "\n".join(readme[:25])  # the first screen
    main = "./setup.sh && .venv/bin/coupprof layers --processor G --freq 4"
    suite = "./setup.sh && .venv/bin/python -m pytest"
    assert main in first and suite in first
    # CI runs exactly the README's test command
    ci = (QUICKSTART.parents[1] / ".ci" / "run").read_text()
    assert suite in ci.splitlines()
    # what the main job prints follows: a table of the default model's 15 layers
    text = "\n".join(readme)
    shown = text[text.index("## What the main job prints"):text.index("## What it means")]
    rows = [line.split()[0] for line in shown.splitlines()
            if line[:6].strip().isdigit()]
    assert rows == [str(i) for i in range(15)], rows
    assert "[SIMULATED]" in shown and "per frame, one call of the whole model" in shown
