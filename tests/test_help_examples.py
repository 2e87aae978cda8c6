"""Every command's --help ends with examples that the real parser accepts, `coupprof --help`
says where to start, and help text fits an 80-column terminal (an indented example line
excepted: it is kept whole, to be copied). The examples are parsed, not run: each
`coupprof ...` of a line (split at shell operators such as | and &&) goes through
build_parser, so an option renamed or removed fails here."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import COMMANDS, build_parser
from profiler.plots import KINDS

REPO = Path(__file__).resolve().parents[1]
COUPPROF = str(Path(sys.executable).with_name("coupprof"))
NAMES = [command for command, _ in COMMANDS.values()]
OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "(", ")"}


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def help_text(parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")  # argparse sizes its help from it
    return parser.format_help()


def examples_section(text: str) -> list[str]:
    """The lines of the help's examples section(s): from a line starting "examples" to the
    next blank line, continuation lines ("... \\") joined."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("examples"):
            inside = True
            continue
        if inside and not line.strip():
            inside = False
        if inside:
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1] + " " + line.strip()
            else:
                lines.append(line.strip())
    return lines


def coupprof_commands(line: str) -> list[list[str]]:
    """The `coupprof ...` command lines in a shell line, comments dropped (a line of prose
    between examples gives none)."""
    if not line.startswith("coupprof"):
        return []
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out: list[list[str]] = [[]]
    for token in lex:
        if token in OPERATORS:
            out.append([])
        else:
            out[-1].append(token)
    return [words for words in out if words[:1] == ["coupprof"]]


def test_the_shell_line_splitter() -> None:
    assert coupprof_commands("coupprof layers --csv - | head -3   # CSV on stdout") == [
        ["coupprof", "layers", "--csv", "-"]]
    assert coupprof_commands("coupprof layers -p B --csv B.csv && coupprof layers -p G") == [
        ["coupprof", "layers", "-p", "B", "--csv", "B.csv"], ["coupprof", "layers", "-p", "G"]]


@pytest.mark.parametrize("command", NAMES)
def test_every_command_ends_with_examples_the_parser_accepts(
        command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = help_text(command_parsers()[command], monkeypatch)
    examples = examples_section(text)
    own = [line for line in examples if line.startswith(f"coupprof {command} ")
           or line == f"coupprof {command}"]
    assert own, f"`coupprof {command} --help` has no example of itself:\n{text}"
    for line in examples:
        for argv in coupprof_commands(line):
            try:
                args = build_parser(argv[1:]).parse_args(argv[1:])
            except SystemExit as exit_:
                pytest.fail(f"`{' '.join(argv)}` (in `coupprof {command} --help`) does not "
                            f"parse: exit {exit_.code}")
            assert callable(args.func)
    # Every line argparse laid out fits 80 columns; an indented example line is kept whole,
    # and so is a usage line the command spells out itself (pin's).
    wide = [line for line in text.splitlines() if len(line) > 80 and not line.startswith(" ")
            and not (line.startswith("usage:") and command_parsers()[command].usage)]
    assert not wide, f"`coupprof {command} --help` has lines over 80 columns: {wide}"


def test_top_level_help_says_where_to_start() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    r = subprocess.run([COUPPROF, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    start = r.stdout[r.stdout.index("start with"):]
    assert "coupprof doctor" in start and "coupprof layers" in start
    assert "docs/quickstart.md" in start and (REPO / "docs" / "quickstart.md").is_file()
    for line in examples_section(start.replace("start with", "examples", 1)):
        for argv in coupprof_commands(line.split("   ")[0]):  # a note follows, 3+ spaces on
            build_parser(argv[1:]).parse_args(argv[1:])
    assert all(len(line) <= 80 for line in r.stdout.splitlines())
    # The summary of plot names every kind it draws.
    assert all(kind in COMMANDS["plot"][1] for kind in KINDS)


def test_a_commands_help_as_a_user_runs_it() -> None:
    """`coupprof layers --help` in a subprocess: exit 0, the examples at its end, intact,
    and the description of both ways of timing (G's default is fused, not one sub-model
    per layer)."""
    env = {**os.environ, "COLUMNS": "80"}
    r = subprocess.run([COUPPROF, "layers", "--help"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    tail = r.stdout.rstrip().split("\n\n")[-1].splitlines()
    assert tail[0] == "examples:"
    assert tail[1] == "  coupprof layers --processor G --freq 4"
    description = r.stdout.split("\n\n")[1]
    assert "--method fused" in description and "--method sliced" in description
    assert not description.startswith("Run a .tflite model layer by layer (one sub-model")
