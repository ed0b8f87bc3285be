"""Curves made small enough to send and draw, keeping their shape (the compare page, issue 39).

Pure functions of numbers, no Django: ``smoothed`` is the moving average the charts draw
(TensorBoard's, the same as ``static/js/chart.js``'s ``smoothed``), ``thinned`` picks the
points of a long curve that a chart of a given width needs, ``compact`` rounds a value for
sending.

``thinned`` is M4 (Jugel et al., VLDB 2014): x's range is cut into equal buckets
(``buckets``) and in each the first, the lowest, the highest and the last point are kept.
Drawn as a line, a bucket no wider than a pixel column looks exactly as the whole curve does
there — a spike (a loss that jumps once in 10 000 steps) is a bucket's highest, so it is
never averaged away, as it would be by sampling every n-th point or by LTTB's areas — and the
first and last points of the curve are always kept, so its ends do not move.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise

KEPT = 4  # points a bucket keeps at most: first, lowest, highest, last
SIGNIFICANT = 7  # digits of a value sent for drawing (a float32's; a chart shows 3 or 4)


def smoothed(values: Sequence[float], weight: float) -> list[float]:
    """Each value replaced by the moving average of those up to it, ``weight`` the past's
    (0: unchanged), debiased at the start so the first ones are not pulled towards 0."""
    if not weight:
        return list(values)
    average, kept, out = 0.0, 1.0, []
    for value in values:
        average = average * weight + value * (1 - weight)
        kept *= weight
        out.append(average / (1 - kept))
    return out


def _bucket_of(xs: Sequence[float], count: int):
    """The function giving a point's bucket (0 … ``count`` - 1) from its x: ``count`` equal
    widths of x's range, the highest x in the last one. One bucket when x never changes. And
    where bucket b begins, about (None with one bucket)."""
    lo, hi = min(xs), max(xs)
    span = hi - lo
    if not span or not math.isfinite(span):
        return (lambda x: 0), None
    scale = count / span
    last = count - 1
    return (lambda x: min(last, int((x - lo) * scale))), (lambda b: lo + b / scale)


def buckets(xs: Sequence[float], count: int) -> list[int]:
    """Each point's bucket when x's range is cut into ``count`` equal widths (the highest x
    in the last)."""
    if not xs:
        return []
    bucket = _bucket_of(xs, count)[0]
    return [bucket(x) for x in xs]


def thinned(xs: Sequence[float], ys: Sequence[float], limit: int) -> list[int]:
    """The indices (ascending) of at most ``limit`` points of the curve ``(xs[i], ys[i])``
    that draw it as the whole does at ``limit / KEPT`` buckets across: all of them when there
    are no more than ``limit``, else in each bucket of x (``buckets``) its first, lowest,
    highest and last point. x need not grow (a run that resumed from an earlier step goes
    back): a bucket is then every point whose x falls in it, wherever it is in the curve."""
    n = len(xs)
    if len(ys) != n:
        raise ValueError(f"as many x as y, not {n} and {len(ys)}")
    if limit < KEPT:
        raise ValueError(f"limit must be at least {KEPT} (a bucket's points), not {limit}")
    if n <= limit:
        return list(range(n))
    count = max(1, limit // KEPT)
    bucket, edge = _bucket_of(xs, count)
    kept: set[int] = set()
    if all(a <= b for a, b in pairwise(xs)):
        # x grows: each bucket is a run of points, found by bisection (on where the next one
        # begins, then set right by a point or two as ``bucket`` rounds) and scanned in C.
        start = 0
        while start < n:
            b = bucket(xs[start])
            end = n if edge is None or b == count - 1 else bisect_left(xs, edge(b + 1), start)
            while end > start and bucket(xs[end - 1]) > b:
                end -= 1
            while end < n and bucket(xs[end]) <= b:
                end += 1
            run = ys[start:end]
            low, high = min(run), max(run)
            kept.update((start, start + run.index(low), start + run.index(high), end - 1))
            start = end
    else:
        first: dict[int, int] = {}
        low_at: dict[int, int] = {}
        high_at: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            b = bucket(x)
            if b not in first:
                first[b] = low_at[b] = high_at[b] = i
            elif y < ys[low_at[b]]:
                low_at[b] = i
            elif y > ys[high_at[b]]:
                high_at[b] = i
            last[b] = i
        for found in (first, low_at, high_at, last):
            kept.update(found.values())
    return sorted(kept)


def compact(value: float) -> float:
    """``value`` to SIGNIFICANT digits, so that it is sent in a few characters."""
    return float(f"{value:.{SIGNIFICANT}g}")
