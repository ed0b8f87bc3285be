"""A long curve thinned for the compare page keeps its shape (``jobs.curves``): in every
bucket of x its lowest and highest point survive (a spike is never lost), its first and last
points are kept, it is never more points than asked, and a short curve is sent whole. The
smoothing is the moving average the charts draw."""

from __future__ import annotations

import math
import random
from array import array

import pytest

from jobs.curves import KEPT, buckets, compact, smoothed, thinned


def noisy_loss(n: int, seed: int = 7) -> list[float]:
    """A falling loss with noise and a few spikes, as a training run reports it."""
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    values = [2 / (1 + i / 300) * (1 + 0.2 * rng.random()) for i in range(n)]
    for at in (17, 4321 % n, n - 2):
        values[at] = 50.0 + at  # a spike, each a different height
    values[777] = -3.0  # and a dip
    return values


def assert_shape_kept(xs, ys, kept: list[int], limit: int) -> None:
    assert kept == sorted(set(kept))
    assert len(kept) <= limit
    assert kept[0] == 0 and kept[-1] == len(xs) - 1  # the ends do not move
    groups: dict[int, list[int]] = {}
    for i, b in enumerate(buckets(xs, limit // KEPT)):
        groups.setdefault(b, []).append(i)
    chosen = set(kept)
    kept_in = {b: [i for i in members if i in chosen] for b, members in groups.items()}
    for b, members in groups.items():
        values = [ys[i] for i in members]
        shown = [ys[i] for i in kept_in[b]]
        assert min(values) in shown and max(values) in shown, f"bucket {b}"
        assert members[0] in kept_in[b] and members[-1] in kept_in[b]


@pytest.mark.parametrize("limit", [4, 5, 400, 2400, 9999])
def test_a_long_curve_keeps_every_buckets_extremes_its_ends_and_no_more_points_than_asked(
        limit):
    ys = noisy_loss(10_000)
    xs = list(range(10_000))
    kept = thinned(xs, ys, limit)
    assert_shape_kept(xs, ys, kept, limit)
    if limit >= 400:
        # the spikes and the dip are there, whatever bucket they fell in
        assert {17, 4321, 9998, 777} <= set(kept)
        assert len(kept) > limit // 2  # and it is not thinned further than it needs


def test_along_time_with_a_gap_the_sparse_part_keeps_its_points():
    # 9 000 reports in the first minute, then 1 000 over the next hour: thinned along time,
    # the hour's points are each in a bucket of their own, and all kept.
    times = [i * 60 / 9000 for i in range(9000)] + [60 + i * 3.6 for i in range(1000)]
    ys = noisy_loss(10_000)
    kept = thinned(times, ys, 2400)
    assert_shape_kept(times, ys, kept, 2400)
    assert set(range(9100, 10_000)) <= set(kept)


def test_x_that_goes_back_a_resumed_run_still_keeps_every_buckets_extremes():
    # steps 0…5999, then a restart from the checkpoint at 4000 on to 9999
    steps = list(range(6000)) + list(range(4000, 10_000))
    ys = noisy_loss(len(steps), seed=3)
    kept = thinned(steps, ys, 800)
    assert_shape_kept(steps, ys, kept, 800)


def test_arrays_and_lists_thin_alike_and_a_short_or_flat_curve_is_whole_or_its_ends():
    ys = noisy_loss(3000)
    assert thinned(array("d", range(3000)), array("d", ys), 400) == thinned(
        list(range(3000)), ys, 400)
    assert thinned([1, 2, 3], [5.0, 1.0, 2.0], 4) == [0, 1, 2]
    assert thinned([], [], 4) == []
    flat = thinned([7] * 100, [1.0] * 50 + [3.0] + [1.0] * 49, 8)  # one x: one bucket
    assert flat == [0, 50, 99]


def test_bad_limits_and_lengths_are_refused():
    with pytest.raises(ValueError, match="at least 4"):
        thinned([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], 3)
    with pytest.raises(ValueError, match="as many x as y"):
        thinned([1, 2], [1.0], 4)


def test_smoothing_is_the_debiased_moving_average_the_charts_draw():
    assert smoothed([1.0, 2.0, 3.0], 0) == [1.0, 2.0, 3.0]
    # TensorBoard's: the first value is itself, not pulled towards 0
    out = smoothed([4.0, 0.0, 8.0], 0.5)
    assert out[0] == pytest.approx(4.0)
    assert out[1] == pytest.approx((0.5 * 0.5 * 4.0 + 0.5 * 0.0) / (1 - 0.25))
    assert out[2] == pytest.approx((0.25 * 0.5 * 4.0 + 0.5 * 0.5 * 0.0 + 0.5 * 8.0)
                                   / (1 - 0.125))
    constant = smoothed([3.0] * 1000, 0.99)
    assert all(math.isclose(v, 3.0) for v in constant)


def test_values_are_sent_to_seven_significant_digits():
    assert compact(0.12345678901) == 0.1234568
    assert compact(123456789.0) == 123456800.0
    assert compact(3.0) == 3.0 and compact(1e-12 / 3) == 3.333333e-13
