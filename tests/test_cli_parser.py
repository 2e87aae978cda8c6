"""The `coupprof` parser: every command listed with its summary, and only the command
being run loaded (so `coupprof --help` does not import pandas or LiteRT)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import COMMANDS, build_parser

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


def subcommands(parser) -> dict[str, object]:
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)


def help_texts(parser) -> dict[str, str]:
    action = next(a for a in parser._actions if a.dest == "command")
    return {c.dest: c.help for c in action._choices_actions}


def test_the_full_parser_registers_each_module_under_its_listed_name_and_summary() -> None:
    full = build_parser()
    assert list(subcommands(full)) == [c for c, _ in COMMANDS.values()]
    assert help_texts(full) == dict(COMMANDS.values())
    for parser in subcommands(full).values():
        assert parser.get_default("func") is not None  # really registered, not a stub


@pytest.mark.parametrize("command", [c for c, _ in COMMANDS.values()])
def test_naming_a_command_loads_it_in_full_and_lists_the_rest(command: str) -> None:
    lazy = build_parser([command, "--frames", "3"])
    subs = subcommands(lazy)
    assert list(subs) == [c for c, _ in COMMANDS.values()]
    assert help_texts(lazy) == dict(COMMANDS.values())
    loaded = [name for name, p in subs.items() if p.get_default("func") is not None]
    assert loaded == [command]


def test_top_level_help_imports_no_command_module() -> None:
    code = ("import sys; from profiler.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "heavy = [m for m in ('pandas', 'numpy', 'ai_edge_litert', 'rich') if m in sys.modules]\n"
            "print('heavy', heavy, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "heavy []" in r.stderr
    assert all(c in r.stdout for c, _ in COMMANDS.values())


def test_cli_lists_commands_and_rejects_an_unknown_one() -> None:
    r = subprocess.run([COUPPROF, "bogus"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "invalid choice: 'bogus'" in r.stderr
    r = subprocess.run([COUPPROF, "zoo", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--list" in r.stdout
