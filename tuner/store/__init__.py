"""What the tuner keeps per GPU: best.yaml, bench.yaml, landscapes, history, and moving them between hosts."""
