"""The tuned kernels inside PyTorch programs (docs/torch.md): `optimize(model, example_input)` swaps every
Conv2d that has a tuned kernel, with the BatchNorm, residual add and activation fused after it, for a custom
op that launches the kernel best.yaml names. Named torch_ops, not torch, so that it can never shadow the
`torch` package. `plan` needs no torch; `optimize` and the ops import it when first used."""
from __future__ import annotations


def __getattr__(name: str):
    if name in ("optimize", "Optimized"):
        from tuner.torch_ops import optimize

        return getattr(optimize, name)
    raise AttributeError(f"module 'tuner.torch_ops' has no attribute {name!r}")
