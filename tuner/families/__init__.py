"""Kernel families: one folder each (tuner/families/<name>/), found by tuner.families.registry."""
