"""The examples that end every command's --help, and the help layout that keeps them.

One table for all commands, so a command module needs no epilog of its own and an
example can be checked against the real parser in one place (tests/test_help_examples.py
parses every `coupprof ...` line here). The lines are real command lines: on the
simulated board (any machine with no known board) each runs as written, the longest (the
sweep) in about half a minute, and they follow one another (the sweep and the transfer
table are what explore, plot and report read). calibrate, zoo and import keep their longer, annotated examples in their
own modules; `with_examples` leaves an epilog that already has them alone.

The top-level help says where to start.
"""

from __future__ import annotations

import argparse
import re
import textwrap

EXAMPLES: dict[str, tuple[str, ...]] = {
    "layers": (
        "coupprof layers --processor G --freq 4",
        "coupprof layers -p B --frames 20 --csv - | head -3     # the CSV on stdout",
    ),
    "transfer-matrix": (
        "coupprof transfer-matrix --processors B,G --frames 10 --csv tm.csv",
        "coupprof transfer-matrix --devices devices.toml --frames 10 --csv links.csv",
    ),
    "run": (
        "coupprof run --order B8G7 --mode pipeline --frames 50",
        "coupprof run --order G15 --mode switch --freq 4 --frames 20 --no-predict",
    ),
    "predict": (
        "coupprof layers -p B --csv B.csv && coupprof layers -p G --csv G.csv",
        "coupprof predict --order B8G7 --mode pipeline --layers B.csv,G.csv",
        "coupprof predict --devices devices.toml --order 'd0:B8 d1:G7' --mode pipeline "
        "--layers d0=B.csv,G.csv --layers d1=B.csv,G.csv --links links.csv",
    ),
    "sweep": (
        "coupprof sweep --processors B,G --freqs 1,4 --frames 10 -o sweep-BG",
        "coupprof sweep --processors B,G --freqs 1,4 --frames 10 -o sweep-BG --resume",
    ),
    "explore": (
        "coupprof explore --sweep sweep-BG --transfers tm.csv --mode pipeline",
        "coupprof explore --sweep sweep-BG --transfers tm.csv --latency-ms 30",
        "coupprof explore --devices devices.toml --layers d0=B.csv,G.csv "
        "--layers d1=B.csv,G.csv --links links.csv",
    ),
    "plot": (
        "coupprof plot efficiency sweep-BG -o efficiency.png",
        "coupprof plot transfers tm.csv -o transfers.png",
    ),
    "report": (
        "coupprof report coupprof-out --format html    # coupprof-out/report.html",
    ),
    "slice": (
        "coupprof zoo mobilenet_v1 --alpha 0.25 --size 128 -o mnv1.tflite",
        "coupprof slice mnv1.tflite --verify -o mnv1-layers/",
    ),
    "collect": (
        "coupprof collect --port virtual --seconds 5 -o trace.csv",
    ),
    "boards": (
        "coupprof boards",
        "coupprof boards show sim",
        "coupprof boards --devices sim2",
    ),
    "pin": (
        "coupprof pin -p B --freq 3 -- coupprof layers -p B --frames 20",
    ),
    "dvfs-latency": (
        "coupprof dvfs-latency --processor B --levels 1,4 --repeats 3",
    ),
    "doctor": (
        "coupprof doctor",
        "coupprof doctor --board sim",
        "coupprof doctor --devices sim2",
    ),
}

START_HERE = """\
start with (no board attached: the simulated board, marked [SIMULATED]):
  coupprof doctor                           what this machine and board have
  coupprof layers --processor G --freq 4    every layer's time on G, level 4
then docs/quickstart.md (layers, predict, run) and `coupprof COMMAND --help`,
which ends with examples."""


def examples_epilog(command: str) -> str | None:
    lines = EXAMPLES.get(command)
    if not lines:
        return None
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def has_examples(epilog: str | None) -> bool:
    return bool(epilog) and any(line.startswith("examples") for line in str(epilog).splitlines())


def with_examples(parser: argparse.ArgumentParser, command: str) -> None:
    """End `parser`'s help with the command's examples (unless it has its own) and lay
    it out with `KeepLinesFormatter`."""
    parser.formatter_class = KeepLinesFormatter
    if has_examples(parser.epilog):
        return
    extra = examples_epilog(command)
    if extra:
        parser.epilog = f"{parser.epilog.rstrip()}\n\n{extra}" if parser.epilog else extra


# A line that opens a paragraph of its own: "exit codes: ...", "methods: ...".
HEADING = re.compile(r"[A-Za-z][\w ]{0,30}:(\s|$)")


class KeepLinesFormatter(argparse.HelpFormatter):
    """Description and epilog as written where they fit the terminal: an indented line
    (an example to copy) is kept whole, and a paragraph is refilled only if one of its
    lines is too wide. argparse's default refills everything (examples ran together),
    its raw one nothing (a one-line description ran off the screen)."""

    def start_section(self, heading: str | None) -> None:
        # argparse never wraps a group's title; a long one ran past the terminal.
        if heading and len(heading) + 1 > self._width - self._current_indent:
            heading = textwrap.fill(heading, self._width - self._current_indent - 1,
                                    break_on_hyphens=False)
        super().start_section(heading)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        para: list[str] = []

        def flush() -> None:
            if para and any(len(indent + line) > width for line in para):
                out.append(textwrap.fill(" ".join(line.strip() for line in para), width,
                                         initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False, break_long_words=False))
            else:
                out.extend(indent + line.rstrip() for line in para)
            para.clear()

        for line in text.splitlines():
            if not line.strip() or line[0].isspace():
                flush()  # an indented line (a command to copy) stays whole
                out.append((indent + line).rstrip())
                continue
            if HEADING.match(line):
                flush()
            para.append(line)
        flush()
        return "\n".join(out)
