"""What the CuTe DSL families share (not a family: no FAMILY)."""
