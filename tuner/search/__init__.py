"""The Optuna study over a layer's joint space, the cost model that orders it, and replayed searches."""
