"""Figures as tables and terminals print them: parameter counts and byte sizes, one way everywhere
(Table 3, `ckpt list`, the cost table of `sweep --dry-run`)."""
from __future__ import annotations

import math


def _number(x) -> float | None:
    try:
        n = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(n) else n


def count_label(n) -> str:
    """A count as papers print a model's size: 94.4M, 317M, 23.1K, 950; "-" when unknown."""
    n = _number(n)
    if n is None:
        return "-"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def bytes_label(n) -> str:
    """Bytes in decimal units: 702 MB, 1.3 GB, 0 B; "?" when unknown."""
    n = _number(n)
    if n is None:
        return "?"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"
