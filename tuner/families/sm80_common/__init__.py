"""What the CUTLASS 2.x implicit-GEMM families (sm80, sm80_group, sm80_dgrad) share: CUTLASS's Sm80 implicit GEMM
(`ImplicitGemmConvolution`, cp.async + mma.sync), its configuration and static checks (space.py), the fields its
kernel templates take, its runner and visitor-tree epilogue (codegen.py), and its cost-model terms (costmodel.py).
Not a family: it defines no FAMILY, and a family imports it, never another family."""
