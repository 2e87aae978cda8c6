"""How layers are measured and run: sliced (every layer its own call) or fused (a stage's
layers in one call; a table's layer times as differences of whole-model prefixes,
`profiler.measure.fused`), and which of the two a processor gets when --method is not
given.

A str enum: it equals, prints and serialises as the plain string, so --method's
choices, CSV cells and JSON sidecars read "fused" and "sliced" as they always have.
"""

from __future__ import annotations

from enum import Enum

from profiler.boards.model import ProcessorKind


class Method(str, Enum):
    FUSED = "fused"
    SLICED = "sliced"

    # The value, not "Method.FUSED", wherever it is printed or formatted (the default
    # of a str mix-in changed between Python releases).
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def default_for(cls, kind: ProcessorKind) -> Method:
        """fused for accelerators (G, N: a fixed per-call cost dwarfs small layers),
        sliced for CPU clusters (microseconds per call; sliced also gives the hand-overs)."""
        return cls.FUSED if kind.is_accelerator else cls.SLICED

    @classmethod
    def chosen(cls, asked: str | None, kind: ProcessorKind) -> Method:
        """``asked`` (--method) if given, else `default_for` ``kind``."""
        return cls(asked) if asked else cls.default_for(kind)


#: --method's choices, as plain strings (argparse prints them in its messages).
METHODS: tuple[str, ...] = tuple(m.value for m in Method)


#: The fused method's default bound on the prefix models loaded at once, in MiB
#: (`--loaded-mb`; docs/fused.md, "Memory"): ResNet50 224 in 14 blocks, MobileNetV1 224
#: in one.
LOADED_MB_DEFAULT = 384.0
