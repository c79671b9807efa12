"""From a kernel configuration to a compiled library: C++ emission and the nvcc / DSL compile cache."""
