"""How full a quota is, for the bars of the quota and files pages."""

from __future__ import annotations

WARN_AT = 80  # percent


def meter(used: int, limit: int) -> dict:
    """``percent`` of the limit used (0..100); ``full`` when nothing more fits (red),
    ``warn`` when nearly so; ``none`` when the limit is zero (nothing allowed)."""
    if limit > 0:
        percent, full = min(100, round(used * 100 / limit)), used >= limit
    else:
        percent, full = (100, True) if used > 0 else (0, False)
    return {"percent": percent, "full": full, "warn": not full and percent >= WARN_AT,
            "none": limit <= 0}
