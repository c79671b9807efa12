"""The sm90_s2d family's C++: a runner that folds the tensors around the sm90 conv kernel's runner
(templates/runner.h); the kernel alias is sm90_common's."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tuner.families.base import CppPieces
from tuner.families.sm90_common import codegen as conv_codegen
from tuner.families.sm90_s2d.space import Sm90S2dConfig

TEMPLATES = Path(__file__).parent / "templates"


def cpp_pieces(configs: Sequence[Sm90S2dConfig] = ()) -> CppPieces:
    conv = conv_codegen.cpp_pieces()
    return CppPieces(conv.includes, (*conv.runners, (TEMPLATES / "runner.h").read_text()), "Sm90S2dRunner",
                     conv.preamble)
