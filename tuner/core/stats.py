"""Summary figures over many layers."""
from __future__ import annotations

import math
from collections.abc import Iterable


def geometric_mean(values: Iterable[float]) -> float:
    """Of the positive finite values (nan where there is none)."""
    values = [v for v in values if v and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan
