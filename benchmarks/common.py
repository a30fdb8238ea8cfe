"""What the benchmarks share: each figure printed as one JSON line."""

from __future__ import annotations

import json
import sys


def emit(config, metric: str, value, unit: str, digits: int | None = 3, stream=None) -> None:
    """Print ``{"config", "metric", "value", "unit"}`` as one JSON line, flushed; a float value rounded to
    ``digits`` decimals (None: as it is); ``stream``: where to (default: this process's stdout)."""
    if digits is not None and isinstance(value, float):
        value = round(value, digits)
    line = json.dumps({"config": config, "metric": metric, "value": value, "unit": unit})
    print(line, file=stream or sys.stdout, flush=True)
