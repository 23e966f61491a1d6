"""How numbers that decide something are printed: p-values never as 0, shares with the precision
that puts them on the right side of their threshold."""

from __future__ import annotations

import math

P_FLOOR = 1e-12  # below this a p-value prints as "< 1e-12" (floating point says no more)


def format_p(value: float | None, digits: int = 4) -> str:
    """A p-value as text: "" where there is none, "< 1e-12" below P_FLOOR (0 included: a p-value
    is never 0), two significant digits below 10^-digits (1.9e-12), else `digits` decimals."""
    if value is None or not isinstance(value, (int, float)) or math.isnan(value):
        return ""
    if value < P_FLOOR:
        return f"< {P_FLOOR:g}"
    if value < 10**-digits:
        return f"{value:.2g}"
    return f"{value:.{digits}f}"


def decisive_percent(share: float, threshold: float, digits: int = 2, most: int = 8) -> str:
    """`share` (0-1) as a percentage with at least `digits` decimals, and more where fewer would put it
    on the other side of `threshold` (0-1) or on it: 0.019986 against 0.02 prints "1.999%", not "2.00%"."""
    if share is None or math.isnan(share):
        return ""
    below, equal = share < threshold, share == threshold
    for places in range(digits, most + 1):
        shown = round(share * 100, places)
        if (shown < threshold * 100) == below and (shown == threshold * 100) == equal:
            return f"{shown:.{places}f}%"
    return f"{share * 100:.{most}f}%"
