"""What the CUTLASS 3.x sm90 families (sm90_conv, sm90_s2d, sm90_gemm) share: the conv kernel that sm90_conv runs on
the layer and sm90_s2d on a fold of it, with its configuration and static checks (space.py), its C++ (codegen.py)
and its cost model (costmodel.py); and with sm90_gemm, the input types, the epilogue schedules, what the 3.x fusion
operations fuse and their C++. Not a family: it defines no FAMILY, and a family imports it, never another family."""
