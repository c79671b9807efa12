"""TF32 warpgroup MMA for the sm90 DSL kernel: wgmma.mma_async's .tf32 form (K 8, both operands K-major, f32
accumulators). The DSL (4.8.1) wraps only the f16/bf16, fp8 and int8 forms; its SM90 MMA atom type takes any of
PTX's element types, so this op builds that atom with TFloat32 operands, as MmaF16BF16Op does with 16-bit ones."""
from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import cute_nvgpu as _cute_nvgpu_ir
from cutlass.cute.atom import make_atom
from cutlass.cute.core import _pack_shape
from cutlass.cute.nvgpu.common import OperandMajorMode
from cutlass.cute.nvgpu.warpgroup.mma import MmaOp, MmaTraits, OperandSource

INSTRUCTION_K = 8  # a TF32 wgmma's K: 32 bytes of each row, as f16's K 16


@dataclass(frozen=True)
class MmaTF32Op(MmaOp):
    descriptive_name = "warpgroup TF32 MMA Operation"

    def __init__(self, instruction_mn, a_major_mode, b_major_mode) -> None:
        super().__init__(cutlass.TFloat32, cutlass.TFloat32, cutlass.Float32, (*instruction_mn, INSTRUCTION_K),
                         OperandSource.SMEM, a_major_mode, b_major_mode)

    def _make_trait(self, *, loc=None, ip=None, **kwargs) -> "MmaTF32Trait":
        shape_mnk = _pack_shape(self.shape_mnk, loc=loc, ip=ip)
        ty = _cute_nvgpu_ir.MmaAtomSM90Type.get(
            shape_mnk.type.attribute, self.a_major_mode._to_ir(), self.b_major_mode._to_ir(),
            self.a_dtype.mlir_type, self.b_dtype.mlir_type, self.acc_dtype.mlir_type, self.a_src._to_ir())
        return MmaTF32Trait(make_atom(ty, [cutlass.Boolean(False).ir_value(loc=loc, ip=ip)], loc=loc, ip=ip))


class MmaTF32Trait(MmaTraits):
    pass


def make_tf32_tiled_mma(atom_layout_mnk, tiler_mn) -> cute.TiledMma:
    """The tiled MMA of TF32 wgmmas (64 x tile_n x 8 each) over the consumer warpgroups, K-major A and B."""
    k_major = OperandMajorMode.K
    return cute.make_tiled_mma(cute.make_mma_atom(MmaTF32Op(tiler_mn, k_major, k_major)), atom_layout_mnk)
